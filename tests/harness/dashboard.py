"""The web dashboard for tests: served on its own over a real home (what `hermes
dashboard` does), and a browser-like HTTP client (cookies, forms and their CSRF token)."""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp

from gateway.admission.people import People
from gateway.app import build_memory
from gateway.config import load_config
from gateway.dashboard.auth import Credentials
from gateway.dashboard.pages import Dashboard, Parts
from gateway.edge.http_server import HttpServer
from hermes.identity import owner_user_id
from hermes.state.db import SessionDB
from hermes.state.models import Reminder, utcnow
from hermes.state.reminders import new_reminder_id

PASSWORD = "a long enough password"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
NONCE = re.compile(r'name="nonce" value="([^"]+)"')


@dataclass
class Served:
    home: Path
    db: SessionDB
    people: People
    dashboard: Dashboard
    base: str  # http://127.0.0.1:PORT
    owner: str


@contextlib.asynccontextmanager
async def serve(
    home: Path, config_text: str = "", *, password: bool = True, database_url: str | None = None
) -> AsyncIterator[Served]:
    """The dashboard over `home` on an ephemeral port, the owner's password set; its
    state.db there, or on the PostgreSQL `database_url`."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("gateway:\n  http:\n    port: 0\n" + config_text)
    config = load_config(home)
    db = SessionDB.open(home, database_url)
    owner = owner_user_id(home)
    db.people.ensure_user(owner, role="owner", display_name="Olive")
    memory = build_memory(home, config, db, None)
    people = People(config, db, memory)
    if password:
        Credentials.load(home).set_password(owner, PASSWORD)
    dashboard = Dashboard(Parts(home, config, db, people, memory), 0)
    server = HttpServer("127.0.0.1", 0, dict)
    for route in dashboard.routes():
        server.add(route)
    await server.start()
    dashboard.site.set_port(server.port)
    try:
        yield Served(home, db, people, dashboard, f"http://127.0.0.1:{server.port}", owner)
    finally:
        await server.stop()
        db.close()


def reminder(user_id: str, chat_id: str, text: str, due_in: timedelta, tz: str = "UTC") -> Reminder:
    """A one-off Telegram DM reminder of `user_id`, due in `due_in`."""
    return Reminder(
        id=new_reminder_id(),
        user_id=user_id,
        owner_id=user_id,
        platform="telegram",
        chat_id=chat_id,
        chat_type="dm",
        session_key=f"telegram:dm:{chat_id}",
        text=text,
        timezone=tz,
        due_at=utcnow() + due_in,
    )


class Browser:
    """An HTTP client that keeps cookies and fills in each form's CSRF token from the
    last page it read, as a browser submitting that page's form would."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.page = ""

    async def close(self) -> None:
        await self.session.close()

    async def get(self, path: str, **kw: Any) -> tuple[int, str]:
        async with self.session.get(self.base + path, allow_redirects=True, **kw) as response:
            self.page = await response.text()
            return response.status, self.page

    async def get_raw(self, path: str, **kw: Any) -> aiohttp.ClientResponse:
        async with self.session.get(self.base + path, allow_redirects=False, **kw) as response:
            await response.read()
            return response

    async def post(
        self, path: str, data: dict[str, str] | None = None, *, csrf: bool = True, **kw: Any
    ) -> tuple[int, str]:
        fields = dict(data or {})
        if csrf and "csrf" not in fields and (found := CSRF.search(self.page)):
            fields["csrf"] = found.group(1)
        async with self.session.post(
            self.base + path, data=fields, allow_redirects=True, **kw
        ) as response:
            self.page = await response.text()
            return response.status, self.page

    async def login(self, password: str = PASSWORD) -> tuple[int, str]:
        await self.get("/admin/login")
        nonce = NONCE.search(self.page)
        assert nonce is not None, self.page
        return await self.post("/admin/login", {"nonce": nonce.group(1), "password": password})

    def note(self) -> str:
        found = re.search(r'<p class="note" role="status">(.*?)</p>', self.page, re.S)
        return html.unescape(found.group(1)) if found else ""


__all__ = ["PASSWORD", "Browser", "Served", "reminder", "serve"]
