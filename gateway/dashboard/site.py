"""The dashboard's routes under `/admin/` and the checks every request passes, in order:

1. the `Host` header names this server (a DNS-rebinding page cannot reach it);
2. a login: the signed cookie names a live login in state.db, of a person who is an
   owner or admin *now* (the role is read again on every request, not at login);
3. on every change (POST): the form's CSRF token matches the login's, and an `Origin`
   header, when the browser sends one, is this server;
4. every answer carries `Content-Security-Policy: default-src 'self'`, no framing,
   no caching, no referrer; every change is recorded in the audit log.

The pages themselves are in `pages.py`; logins and passwords in `auth.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import jinja2
from aiohttp import web

from gateway.admission.authority import Action, Party, decide
from gateway.commands.admin import duration
from gateway.config import HermesConfig
from gateway.dashboard.auth import (
    CREDENTIALS_FILENAME,
    Attempts,
    Credentials,
    CredentialsError,
)
from gateway.edge.http_server import Handler, Route
from hermes.state.models import User

logger = logging.getLogger(__name__)

PREFIX = "/admin"
MAX_NOTICE = 300  # characters of a notice carried through a redirect
COOKIE = "hermes_admin"
LOGIN_COOKIE = "hermes_login"  # the login form's own CSRF token (no login yet)
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # a login link's token never leaves for another site in a Referer (and forms still
    # carry their Origin: "no-referrer" would make a browser send "Origin: null")
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
FAILED = "That did not work (the gateway's log says why); nothing more was changed."
PROBLEMS = web.RequestKey("problems", list[Any])  # what is wrong, for the page's banner
FORM_FIELD_CHARS = 4000  # a memory entry is at most 2,200; nothing on a form is longer


@dataclass(frozen=True, slots=True)
class Operator:
    """The person behind a dashboard request, checked again on every request."""

    user_id: str
    name: str
    role: str
    token: str  # the login's token (its CSRF token is derived from it)
    csrf: str

    @property
    def is_owner(self) -> bool:
        return self.role == "owner"


PageHandler = Callable[[web.Request, Operator], Awaitable[web.StreamResponse]]


class RefusedError(Exception):
    """A request the dashboard will not serve, with the status and a plain reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Site:
    """What every page shares: templates, the credentials, the security checks."""

    def __init__(self, home: Path, config: HermesConfig, db: Any, port: int) -> None:
        self.home, self.config, self.db = home, config, db
        self._credentials = Credentials.load(home)
        self._credentials_stamp = self._stamp()
        self.attempts = Attempts(db.access)
        self.secure = (config.dashboard.public_url or "").startswith("https://")
        self.proxies = [
            ipaddress.ip_network(item, strict=False) for item in config.dashboard.trusted_proxies
        ]
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("gateway.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["when"] = _when
        self.templates.filters["duration"] = duration
        self.templates.filters["lasting"] = _lasting
        self.templates.filters["percent"] = _percent
        # what is wrong now, shown on top of every page (the pages set it)
        self.problems: Callable[[], list[Any]] | None = None
        self.set_port(port)

    @property
    def credentials(self) -> Credentials:
        """dashboard.json as it is now (`hermes dashboard passwd` may change it while the
        gateway runs): read again when its modification time changes."""
        stamp = self._stamp()
        if stamp != self._credentials_stamp:
            try:
                self._credentials = Credentials.load(self.home)
            except CredentialsError as exc:  # the last good ones stay in use
                logger.error("dashboard: %s", exc)
            self._credentials_stamp = stamp
        return self._credentials

    def _stamp(self) -> int:
        try:
            return (self.home / CREDENTIALS_FILENAME).stat().st_mtime_ns
        except OSError:
            return 0

    def set_port(self, port: int) -> None:
        """The hosts a request may name (the port is known once the server listens)."""
        host = self.config.gateway.http.host
        names = {host, "localhost", "127.0.0.1", "[::1]"}
        self.hosts = {f"{name}:{port}" for name in names} | {name for name in names if port == 80}
        if (public := self.config.dashboard.public_url) is not None:
            parts = urlsplit(public)
            self.hosts.add(parts.netloc.lower())
            self.origins = {public.lower()}
        else:
            self.origins = set()
        self.origins |= {f"http://{h}" for h in self.hosts}

    # -- answers ---------------------------------------------------------------------------

    def page(self, name: str, status: int = 200, **values: Any) -> web.Response:
        values = {"me": None, "note": "", "page": "", "problems": [], "refresh": 0, **values}
        body = self.templates.get_template(name).render(prefix=PREFIX, **values)
        response = web.Response(text=body, status=status, content_type="text/html")
        response.headers.update(HEADERS)
        return response

    def notice(self, request: web.Request) -> str:
        """The notice in the address, if the dashboard itself wrote it (signed), else ''."""
        note, signature = request.query.get("note", ""), request.query.get("ns", "")
        if not note or not hmac.compare_digest(signature, self.credentials.notice(note)):
            return ""
        return note

    def refusal(self, refused: RefusedError, me: Operator | None = None) -> web.Response:
        """The refusal page: with the pages' navigation for someone logged in (who is
        offered no login), a login link for anyone else."""
        return self.page("refused.html", status=refused.status, reason=refused.reason, me=me)

    async def _refused(self, request: web.Request, refused: RefusedError) -> web.Response:
        me = None
        with contextlib.suppress(Exception):  # the page still says no, whatever failed
            me = await asyncio.to_thread(self.operator, request)
        return self.refusal(refused, me)

    def redirect(self, path: str, note: str = "", **query: str) -> web.Response:
        if note:
            note = note[:MAX_NOTICE]
            query["note"], query["ns"] = note, self.credentials.notice(note)
        location = PREFIX + path + (f"?{urlencode(query)}" if query else "")
        response = web.Response(status=303, headers={"Location": location})
        response.headers.update(HEADERS)
        return response

    # -- checks ----------------------------------------------------------------------------

    def check_host(self, request: web.Request) -> None:
        if request.host.lower() not in self.hosts:
            raise RefusedError(421, "This server does not answer for that host name.")

    def check_origin(self, request: web.Request) -> None:
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() not in self.origins:
            raise RefusedError(403, "The form was sent from another site.")

    def client(self, request: web.Request) -> str:
        """The address a login attempt came from: from one of the trusted proxies
        (`dashboard.trusted_proxies`) behind the TLS `public_url`, the last address in
        X-Forwarded-For (the one the proxy added; earlier ones are the client's to
        invent); from anyone else, the connection's own (a client reaching the port
        directly cannot name itself someone new after each failed login)."""
        remote = request.remote or "?"
        forwarded = request.headers.get("X-Forwarded-For")
        if self.secure and forwarded and self._from_proxy(remote):
            return forwarded.rsplit(",", 1)[-1].strip()[:64]
        return remote

    def _from_proxy(self, remote: str) -> bool:
        try:
            address = ipaddress.ip_address(remote)
        except ValueError:
            return False
        return any(address in network for network in self.proxies)

    def operator(self, request: web.Request) -> Operator | None:
        """The logged-in owner or admin behind `request`, or None."""
        raw = request.cookies.get(COOKIE, "")
        token = self.credentials.unsign(raw) if raw else None
        if token is None:
            return None
        login = self.db.dashboard.login(token)
        if login is None:
            return None
        user = self.db.people.get_user(login.user_id)
        if user is None or not self.may_use(user):
            return None
        csrf = self.credentials.csrf(token)
        return Operator(user.id, user.display_name or user.id, user.role, token, csrf)

    @staticmethod
    def may_use(user: User) -> bool:
        """The dashboard is for admins and owners (the one decision), never the blocked."""
        party = Party(user.id, user.role)
        return user.status != "blocked" and decide(party, Action.USE_DASHBOARD) is None

    def login_cookie(
        self, response: web.StreamResponse, name: str, value: str, **extra: Any
    ) -> None:
        response.set_cookie(
            name,
            value,
            path=PREFIX,
            httponly=True,
            secure=self.secure,
            samesite="Strict",
            **extra,
        )

    async def audit(self, me: Operator, action: str, subject: str = "", detail: str = "") -> None:
        """The change in the audit log (written off the event loop)."""
        await asyncio.to_thread(self.db.dashboard.audit, me.user_id, action, subject, detail)
        logger.info("dashboard: %s by %s (%s)", action, me.user_id, subject)

    # -- routes ----------------------------------------------------------------------------

    def route(self, method: str, path: str, handler: PageHandler) -> Route:
        """A page that needs a login (and, for POST, the form's CSRF token)."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            me = await asyncio.to_thread(self.operator, request)
            if me is None:
                if request.method != "GET":
                    raise RefusedError(403, "Your login has ended: log in again.")
                return self.redirect("/login")
            if request.method == "POST":
                self.check_origin(request)
                form = await form_of(request)
                if not hmac.compare_digest(form.get("csrf", ""), me.csrf):
                    raise RefusedError(403, "This form has expired: reload the page and retry.")
            elif self.problems is not None:
                request[PROBLEMS] = await asyncio.to_thread(self.problems)
            return await handler(request, me)

        return self.open_route(method, path, guarded)

    def open_route(self, method: str, path: str, handler: Handler) -> Route:
        """A route with the Host check (on its own: the login page, the stylesheet);
        a refusal or an error is a page (the traceback goes to the log)."""

        async def checked(request: web.Request) -> web.StreamResponse:
            try:
                self.check_host(request)
            except RefusedError as refused:
                return self.refusal(refused)  # from elsewhere: nobody's page
            try:
                return await handler(request)
            except RefusedError as refused:
                return await self._refused(request, refused)
            except Exception:
                logger.exception("dashboard: %s %s failed", request.method, request.path)
                return await self._refused(request, RefusedError(500, FAILED))

        return Route(method, PREFIX + path, checked)


async def form_of(request: web.Request) -> dict[str, str]:
    """The posted form's fields, each bounded (aiohttp reads the body once and keeps it)."""
    data = await request.post()
    return {key: value[:FORM_FIELD_CHARS] for key, value in data.items() if isinstance(value, str)}


def _when(moment: Any) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M} UTC"


def _lasting(seconds: float) -> str:
    """A stretch of time as people say it: "40 s", "12 min", "3 h 5 min", "2 d 4 h"."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, hours, days = whole // 60 % 60, whole // 3600 % 24, whole // 86400
    if not hours and not days:
        return f"{minutes} min"
    if not days:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{days} d {hours} h" if hours else f"{days} d"


def _percent(share: float) -> str:
    """0.99996 -> "99.99 %": never rounded up to a whole 100 % that was not."""
    return "100 %" if share >= 1 else f"{int(share * 10_000) / 100:.2f} %"


__all__ = ["COOKIE", "PREFIX", "PROBLEMS", "Operator", "RefusedError", "Site", "form_of"]
