"""The dashboard on a large home: every page's server time and size.

    .venv/bin/python bench/dashboard_pages.py [--people 100] [--sessions 10000]
        [--reminders 300] [--log-lines 3000] [--rounds 7] [--postgres URL] [--only TEXT]

Builds a home of `--people` people (each with two linked accounts and memory), spread
`--sessions` sessions of 4 messages over them, live reminders, kept warnings and errors
and audit entries; serves the dashboard as `hermes dashboard` does (on loopback) and
fetches each page `--rounds` times as the logged-in owner. Server time is the median
from request to the last byte over loopback (the client's share is a fraction of a
millisecond); the aim (issue #45) is under 300 ms and 100 KB a page.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memory_ops import drop_schema, scratch_schema  # bench/memory_ops.py (this folder)

from gateway.admission.people import People
from gateway.app import build_memory
from gateway.config import load_config
from gateway.dashboard.auth import Credentials
from gateway.dashboard.pages import Dashboard, Parts
from gateway.edge.http_server import HttpServer
from hermes.identity import owner_user_id
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.models import LogRecord, Reminder, utcnow
from hermes.state.platform_health import OpenSpan
from hermes.state.reminders import new_reminder_id
from hermes.state.usage import Usage

PASSWORD = "a long enough password for the bench"
WORDS = "garden honey bees trip Busan office invoice piano lesson doctor recipe".split()


def build(home: Path, args: argparse.Namespace) -> tuple[SessionDB, list[str]]:
    db = SessionDB.open(home, args.postgres)
    owner = owner_user_id(home)
    db.people.ensure_user(owner, role="owner", display_name="Olive")
    people = []
    for i in range(args.people):
        user_id = db.people.user_for_identity("telegram", str(10_000 + i), f"Person {i:03d}")
        db.people.ensure_identity("slack", f"U{i:06d}", user_id)
        people.append(user_id)
    now = utcnow()
    for n in range(args.sessions):
        user_id = people[n % len(people)]
        started = now - timedelta(minutes=n)
        chat = db.conversations.start_session(
            user_id, "telegram", f"telegram:dm:{n}", started_at=started
        )
        word = WORDS[n % len(WORDS)]
        db.conversations.add_messages(
            chat.id,
            [
                NewMessage("user", f"about the {word}, note {n}", created_at=started),
                NewMessage("assistant", f"noted the {word}", created_at=started),
                NewMessage("user", f"and the {WORDS[(n + 3) % len(WORDS)]}?", created_at=started),
                NewMessage("assistant", "yes", created_at=started),
            ],
        )
    for n in range(args.reminders):
        user_id = people[n % len(people)]
        db.reminders.add(
            1000,
            Reminder(
                id=new_reminder_id(),
                user_id=user_id,
                owner_id=user_id,
                platform="telegram",
                chat_id=str(10_000 + n % len(people)),
                chat_type="dm",
                session_key=f"telegram:dm:{n}",
                text=f"water the {WORDS[n % len(WORDS)]} {n}",
                timezone="Europe/Berlin",
                due_at=now + timedelta(minutes=7 * n + 1),
            ),
        )
    db.logs.add(
        [
            LogRecord(
                at=now - timedelta(seconds=30 * n),
                level=40 if n % 5 == 0 else 30,
                logger=("hermes.agent.agent", "gateway.runtime", "gateway.loopwatch")[n % 3],
                message=f"something went wrong {n}: HTTP 502 from the model endpoint",
            )
            for n in range(args.log_lines)
        ]
    )
    for n in range(200):
        db.dashboard.audit(owner, "role", people[n % len(people)], "user")
    for day in range(90):  # tokens of every person on each of 90 days, with two models
        when = (now - timedelta(days=day)).strftime("%Y-%m-%d")
        for i, user_id in enumerate(people):
            for model in ("main-model", "side-model"):
                db.usage.add(user_id, Usage(1000 + i, 100 + day, model), day=when)
    for n in range(600):
        db.jobs.record_run(("maintenance", "idle_sessions")[n % 2], n % 9 != 0, f"run {n}")
    for instance in ("gw-a", "gw-b"):  # 30 days of platform health: a state change hourly
        opened: dict[str, OpenSpan] = {}
        for hour in range(30 * 24, 0, -1):
            states = {
                name: ("down", "HTTP 502") if (hour + k) % 17 == 0 else ("up", "")
                for k, name in enumerate(("telegram", "discord", "slack"))
            }
            if instance == "gw-b":
                states["discord"] = ("standby", "")
            at = now - timedelta(hours=hour)
            opened = db.platform_health.record(instance, states, opened, at)
    db.upkeep.index_search()  # as a home that has run a day leaves it: searched, and
    db.upkeep.maintenance()  # the daily upkeep done (statistics, merged indexes)
    return db, people


async def serve_dashboard(home: Path, db: SessionDB, people: list[str]) -> tuple[HttpServer, str]:
    """The dashboard served as `hermes dashboard` serves it, on loopback, the first five
    people given memory, the owner a password: the server and its address."""
    config = load_config(home)
    owner = owner_user_id(home)
    memory = build_memory(home, config, db, None)
    for user_id in people[:5]:
        for k in range(8):
            args = {"action": "add", "target": "user", "content": f"Likes {WORDS[k]} ({k})"}
            await memory.apply(user_id, args, actor="user")
    Credentials.load(home).set_password(owner, PASSWORD)
    dashboard = Dashboard(Parts(home, config, db, People(config, db, memory), memory), 0)
    server = HttpServer("127.0.0.1", 0, dict)
    for route in dashboard.routes():
        server.add(route)
    await server.start()
    dashboard.site.set_port(server.port)
    return server, f"http://127.0.0.1:{server.port}"


async def measure(home: Path, db: SessionDB, people: list[str], rounds: int, only: str) -> None:
    server, base = await serve_dashboard(home, db, people)
    session = db.conversations.list_sessions(people[0], limit=1)[0]
    pages = [
        "/admin/status",
        "/admin/people",
        "/admin/people?page=3",
        "/admin/people?q=person+04",
        f"/admin/memory?user={people[0]}",
        "/admin/sessions",
        "/admin/sessions?page=50",
        "/admin/sessions?q=honey",
        f"/admin/sessions?user={people[1]}",
        f"/admin/sessions/{session.id}?user={people[0]}",
        "/admin/reminders",
        f"/admin/reminders?user={people[2]}",
        "/admin/usage",
        "/admin/usage?days=90",
        f"/admin/usage?days=90&user={people[2]}",
        "/admin/scheduler",
        "/admin/scheduler?job=maintenance",
        "/admin/tools",
        "/admin/logs",
        "/admin/logs?level=warning&since=24h",
        "/admin/logs?level=error&since=7d&q=502",
        "/admin/gateways",
        "/admin/gateways?span=30d",
        "/admin/settings",
    ]
    pages = [page for page in pages if only in page]
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
        async with client.get(base + "/admin/login") as response:
            nonce = re.search(r'name="nonce" value="([^"]+)"', await response.text())
        assert nonce is not None
        form = {"nonce": nonce.group(1), "password": PASSWORD}
        async with client.post(base + "/admin/login", data=form) as response:
            assert response.status == 200, await response.text()
        print(f"| page | server time (median of {rounds}) | size |")
        print("|---|---|---|")
        for page in pages:
            times, size = [], 0
            for _ in range(rounds):
                start = time.perf_counter()
                async with client.get(base + page) as response:
                    body = await response.read()
                    assert response.status == 200, (page, response.status)
                times.append(time.perf_counter() - start)
                size = len(body)
            shown = page.replace(people[0], "<person>").replace(people[1], "<person>")
            shown = shown.replace(people[2], "<person>").replace(session.id, "<session>")
            median = statistics.median(times) * 1000
            print(f"| `{shown}` | {median:.0f} ms | {size / 1000:.1f} KB |")
    await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--people", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--reminders", type=int, default=300)
    parser.add_argument("--log-lines", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--postgres", default=None)
    parser.add_argument("--only", default="", help="measure only the pages whose path has this")
    args = parser.parse_args()
    scratch = ""
    if args.postgres:  # a schema of its own, dropped after: the database is left as found
        scratch, args.postgres = scratch_schema(args.postgres)
        server = args.postgres.split("?")[0]
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        (home / "config.yaml").write_text("gateway:\n  http:\n    port: 0\n")
        started = time.perf_counter()
        db, people = build(home, args)
        print(
            f"built in {time.perf_counter() - started:.0f} s: {args.people} people, "
            f"{args.sessions} sessions, {args.reminders} reminders, {args.log_lines} log lines"
        )
        try:
            asyncio.run(measure(home, db, people, args.rounds, args.only))
        finally:
            db.close()
            if scratch:
                drop_schema(server, scratch)


if __name__ == "__main__":
    main()
