"""The dashboard's pages: login, Status, People, Memory, Sessions, Reminders, Logs.

Every change goes through the home that owns it, as the chat's and the CLI's commands
do: pairing decisions through `People.decide_pairing`, roles and blocks through
`People.set_role` / `set_blocked` (the owner stays reachable), memory through the
memory service (scan, limits, provenance; the actor is "admin", and the audit log
names which one), reminders through their repository. Reads run off the event loop;
changes to people run on it (their listeners, the router's, start tasks there), short
writes as the chat's `/admin` commands are.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar
from urllib.parse import urlencode

from aiohttp import web

from gateway.admission.authority import Action, decide
from gateway.admission.people import People
from gateway.commands.context import RuntimeInfo
from gateway.commands.memory import provider_line
from gateway.config import REMOVE, ConfigError, HermesConfig, update_config
from gateway.dashboard import health, usage
from gateway.dashboard.auth import CredentialsError
from gateway.dashboard.chart import hourly_chart
from gateway.dashboard.problems import Problems, bad_state
from gateway.dashboard.settings import SettingsPages
from gateway.dashboard.site import (
    COOKIE,
    LOGIN_COOKIE,
    PREFIX,
    PROBLEMS,
    Operator,
    RefusedError,
    Site,
    form_of,
)
from gateway.edge.http_server import Route
from gateway.instances import gateways
from gateway.logs import RECENT
from gateway.scheduler import control, read_status
from hermes import extras
from hermes.embedder import Embedder
from hermes.identity import owner_user_id
from hermes.memory.entries import parse as entries_of
from hermes.memory.render import display_entry, render
from hermes.memory.service import MemoryService
from hermes.memory.store import Target
from hermes.reminders import local
from hermes.state.db import SessionDB
from hermes.state.logs import LogFilter
from hermes.state.models import LogRecord, MemoryVersion, as_utc
from hermes.state.people import ROLES
from hermes.state.platform_health import OPEN_WITHIN
from hermes.state.transfer import export_lines, export_markdown
from hermes.tools import capabilities
from hermes.tools.mcp import McpHub
from hermes.tools.session_search import snippet

logger = logging.getLogger(__name__)
T = TypeVar("T")
STATIC = Path(__file__).with_name("static")
LOG_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}
LOG_SINCE = {  # the Logs page's spans (None: all that is kept)
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "all": None,
}
STATUS_REFRESH_S = 10  # the shortest refresh the Status page takes
LOG_MAX_LINES = 5000  # lines on one page or in one export
LOG_FOLLOW_S = 5  # a followed log reloads this often
SESSIONS_PAGE = 30  # sessions per page of the Sessions page (a search's or the latest)
HITS_PER_PERSON = 200  # a person's best messages a search across people groups by session
RUNS_PAGE = 30  # consolidation runs shown per page on the Memory page
PEOPLE_PAGE = 25  # people per page of the People page
USAGE_PAGE = 25  # people on a page of the Usage page
SCHEDULER_RUNS = 50  # runs on a page of the Scheduler page
REMINDERS_PAGE = 50  # reminders per page of the Reminders page
ACCESS = ("active", "blocked", "pending")
_NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass
class Parts:
    """What the pages read and change (the gateway's own, or the CLI's for a home with no
    gateway running)."""

    home: Path
    config: HermesConfig
    db: SessionDB
    people: People
    memory: MemoryService
    embedder: Embedder | None = None
    runtime: RuntimeInfo | None = None
    # the running agent's table of who may use which tools (None: no gateway runs here,
    # a change is config.yaml's alone) and the tool groups it has
    tools_table: dict[str, list[str]] | None = None
    tool_groups: list[str] | None = None
    mcp: McpHub | None = None  # the running agent's MCP servers (None: no gateway runs here)


class Dashboard:
    def __init__(self, parts: Parts, port: int) -> None:
        self.parts = parts
        self.db, self.people, self.memory = parts.db, parts.people, parts.memory
        self.site = Site(parts.home, parts.config, parts.db, port)
        self.problems = Problems(parts.home, parts.config, parts.db, parts.runtime)
        self.site.problems = self.problems.now

    def routes(self) -> list[Route]:
        site = self.site
        return [
            site.open_route("GET", "/static/{name}", self._static),
            site.open_route("GET", "/login", self._login_page),
            site.open_route("POST", "/login", self._login),
            site.route("POST", "/logout", self._logout),
            site.route("GET", "/", self._home),
            site.route("GET", "/status", self._status),
            site.route("GET", "/people", self._people_page),
            site.route("POST", "/people/pairing", self._pairing),
            site.route("POST", "/people/role", self._role),
            site.route("POST", "/people/block", self._block),
            site.route("POST", "/people/link-code", self._link_code),
            site.route("GET", "/memory", self._memory_page),
            site.route("POST", "/memory/add", self._memory_add),
            site.route("POST", "/memory/remove", self._memory_remove),
            site.route("POST", "/memory/undo", self._memory_undo),
            site.route("GET", "/sessions", self._sessions_page),
            site.route("GET", "/sessions/{session_id}", self._session_page),
            site.route("GET", "/sessions/{session_id}/export", self._session_export),
            site.route("POST", "/sessions/{session_id}/delete", self._session_delete),
            site.route("GET", "/reminders", self._reminders_page),
            site.route("POST", "/reminders/cancel", self._reminder_cancel),
            site.route("GET", "/logs", self._logs_page),
            site.route("GET", "/logs/export", self._logs_export),
            site.route("GET", "/usage", self._usage_page),
            site.route("GET", "/gateways", self._gateways_page),
            site.route("GET", "/scheduler", self._scheduler_page),
            site.route("POST", "/scheduler/control", self._scheduler_control),
            site.route("GET", "/tools", self._tools_page),
            site.route("POST", "/tools/set", self._tools_set),
            site.route("POST", "/tools/mcp-check", self._mcp_check),
            *SettingsPages(self).routes(),
        ]

    async def _off_loop(self, work: Callable[[], T]) -> T:
        return await asyncio.to_thread(work)

    def show(self, request: web.Request, me: Operator, name: str, **values: Any) -> web.Response:
        note = self.site.notice(request)
        problems = request.get(PROBLEMS, [])
        page = name.removesuffix(".html")
        return self.site.page(name, me=me, note=note, page=page, problems=problems, **values)

    def unless_sure(
        self,
        request: web.Request,
        me: Operator,
        form: dict[str, str],
        question: str,
        *,
        yes: str,
        detail: str = "",
    ) -> web.Response | None:
        """An action that cannot simply be taken back (block, deny, cancel) asks first:
        a page with the same form and one more field, `sure`; None once it is there.
        Asked after the permission check: nobody is asked to confirm a refusal."""
        if form.get("sure") == "yes":
            return None
        fields = {k: v for k, v in form.items() if k not in ("csrf", "sure")}
        back = "/" + request.path.removeprefix(PREFIX).strip("/").split("/")[0]
        return self.show(
            request,
            me,
            "confirm.html",
            question=question,
            detail=detail,
            yes=yes,
            fields=fields,
            action=request.path.removeprefix(PREFIX),
            back=back,
        )

    # -- login -----------------------------------------------------------------------------

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in {"style.css"}:
            raise RefusedError(404, "No such file.")
        response = web.FileResponse(STATIC / name)
        response.headers["Cache-Control"] = "max-age=300"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    async def _login_page(self, request: web.Request) -> web.StreamResponse:
        """The password form, or (from a /dashboard link) a button that uses the link:
        opening the link logs nobody in, so a chat's link preview cannot spend it."""
        nonce = request.cookies.get(LOGIN_COOKIE) or _nonce()
        response = self.site.page(
            "login.html",
            me=None,
            note=self.site.notice(request),
            token=request.query.get("token", "")[:200],
            nonce=nonce,
            has_password=bool(self.site.credentials.passwords),
        )
        self.site.login_cookie(response, LOGIN_COOKIE, nonce, max_age=3600)
        return response

    async def _login(self, request: web.Request) -> web.StreamResponse:
        site = self.site
        site.check_origin(request)
        form = await form_of(request)
        if not form.get("nonce") or form["nonce"] != request.cookies.get(LOGIN_COOKIE):
            raise RefusedError(403, "The login form has expired: open the login page again.")
        client = self.site.client(request)
        if (wait := site.attempts.wait(client)) > 0:
            return site.redirect("/login", f"Too many failed logins: try again in {wait:.0f} s.")
        if form.get("token"):
            user_id = await self._off_loop(lambda: self.db.dashboard.use_link(form["token"]))
            failed = "That link has expired or was already used: send /dashboard again."
        else:
            user_id = await self._off_loop(lambda: site.credentials.check(form.get("password", "")))
            failed = "Wrong password."
        user = await self._off_loop(lambda: self.db.people.get_user(user_id)) if user_id else None
        if user is None or not site.may_use(user):
            site.attempts.failed(client)
            logger.warning("dashboard: a failed login from %s", client)
            return site.redirect("/login", failed)
        site.attempts.succeeded(client)
        hours = self.parts.config.dashboard.session_hours
        token = await self._off_loop(
            lambda: self.db.dashboard.start_login(user.id, timedelta(hours=hours))
        )
        await self._off_loop(
            lambda: self.db.dashboard.audit(
                user.id, "login", detail="link" if form.get("token") else "password"
            )
        )
        response = site.redirect("/status")
        site.login_cookie(response, COOKIE, site.credentials.sign(token))
        response.del_cookie(LOGIN_COOKIE, path="/admin")
        return response

    async def _logout(self, _request: web.Request, me: Operator) -> web.StreamResponse:
        await self._off_loop(lambda: self.db.dashboard.end_login(me.token))
        await self.site.audit(me, "logout")
        response = self.site.redirect("/login", "Logged out.")
        response.del_cookie(COOKIE, path="/admin")
        return response

    async def _home(self, _request: web.Request, _me: Operator) -> web.StreamResponse:
        return self.site.redirect("/status")

    # -- status ----------------------------------------------------------------------------

    async def _status(self, request: web.Request, me: Operator) -> web.StreamResponse:
        runtime = self.parts.runtime
        health = await runtime.llm_health() if runtime is not None else "not checked"
        values = await self._off_loop(self._status_values)
        asked = request.query.get("refresh", "")
        refresh = max(STATUS_REFRESH_S, min(int(asked), 3600)) if asked.isdigit() else 0
        return self.show(
            request,
            me,
            "status.html",
            model=health,
            model_ok=health.startswith(("ok", "in-process", "no model")),
            refresh=refresh,
            as_of=datetime.now(UTC),
            **values,
        )

    def _status_values(self) -> dict[str, Any]:
        parts, db = self.parts, self.db
        now = datetime.now(UTC)
        activity = db.conversations.activity(now - timedelta(hours=24))
        runtime = parts.runtime
        states = runtime.adapter_states() if runtime is not None else {}
        day = {p.name: p for p in self._platform_health(now - timedelta(hours=24), now)}
        names = sorted(set(states) | set(activity.received) | set(activity.replied) | set(day))
        platforms = [
            {
                "name": name,
                "state": (state := states.get(name, "off" if runtime else "no gateway here")),
                "bad": bad_state(state),
                "received": activity.received.get(name),
                "replied": activity.replied.get(name),
                "day": day.get(name),
            }
            for name in names
        ]
        owner = owner_user_id(parts.home)
        engine = "PostgreSQL" if db.backend == "postgresql" else "SQLite"
        size = db.upkeep.size_bytes() / 1e6
        disk = shutil.disk_usage(parts.home)
        return {
            "platforms": platforms,
            "uptime": runtime.uptime_s() if runtime is not None else None,
            "chart": hourly_chart(activity.per_hour, now),
            "jobs": read_status(parts.home, parts.config, db),
            "search": parts.embedder.status_line() if parts.embedder else "lexical (word index)",
            "provider": provider_line(parts.memory.providers.status(owner)),
            "database": f"{engine}, {size:.1f} MB",
            "disk": f"{disk.free / 1e9:.1f} GB free of {disk.total / 1e9:.1f} GB",
            "audit": db.dashboard.audit_log(30),
            "names": {s.user.id: person_name(s) for s in db.people.users()},
            "logged": {
                span: _counted(db.logs.sources(now - timedelta(hours=hours)))
                for span, hours in (("hour", 1), ("day", 24))
            },
        }

    # -- people ----------------------------------------------------------------------------

    async def _people_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        asked = PeopleQuery.of(request.query)
        values = await self._off_loop(lambda: self._people_values(me, asked))
        code = request.query.get("code", "")[:20]
        return self.show(request, me, "people.html", roles=ROLES, code=code, **values)

    def _people_values(self, me: Operator, asked: PeopleQuery) -> dict[str, Any]:
        """One page of the people the filter finds, with what this operator may do to
        each (the forms shown are the ones the one decision allows: no Block button on
        the owner's row)."""
        everyone = self.db.people.users()
        found = [s for s in everyone if asked.finds(s)]
        if asked.sort == "name":
            found.sort(key=lambda s: person_name(s).casefold())
        else:  # the most recently seen first, the never seen last
            found.sort(
                key=lambda s: as_utc(s.last_active) if s.last_active else _NEVER, reverse=True
            )
        pages = max(1, -(-len(found) // PEOPLE_PAGE))
        page = min(asked.page, pages)
        shown = found[(page - 1) * PEOPLE_PAGE : page * PEOPLE_PAGE]
        owner = owner_user_id(self.parts.home)
        actor = self.people.party_of(me.user_id, me.role)
        powers = {}
        for summary in shown:
            them = self.people.party_of(summary.user.id, summary.user.role)
            powers[them.user_id] = {
                "block": decide(actor, Action.BLOCK, them) is None,
                "roles": [r for r in ROLES if decide(actor, Action.SET_ROLE, them, role=r) is None],
                "link": decide(actor, Action.LINK_CODE, them) is None,
            }
        pending = self.db.access.pending_pairings()
        return {
            "users": shown,
            "names": {s.user.id: person_name(s) for s in shown},
            "total": len(everyone),
            "found": len(found),
            "first": (page - 1) * PEOPLE_PAGE + 1,
            "page_no": page,
            "pages": pages,
            "asked": asked,
            "address": {k: v for k, v in asked.address().items() if k != "page"},
            "pending": pending,
            "owner": owner,
            "powers": powers,
        }

    async def _pairing(self, request: web.Request, me: Operator) -> web.StreamResponse:
        form = await form_of(request)
        code, approve = form.get("code", ""), form.get("decision") == "approve"
        refused = await self._off_loop(lambda: self.people.may(me.user_id, Action.DECIDE_PAIRING))
        if refused is not None:
            raise RefusedError(403, f"Not allowed: {refused}.")
        if not approve:
            found = await self._off_loop(lambda: self.db.access.pairing(code))
            who = f"{found.platform}:{found.platform_user_id}" if found is not None else code
            asked = self.unless_sure(
                request,
                me,
                form,
                f"Deny {who}?",
                yes="Deny",
                detail="They are not let in; they can ask again.",
            )
            if asked is not None:
                return asked
        try:
            done = self.people.decide_pairing(code, approve=approve, by=me.user_id)
        except PermissionError as exc:
            raise RefusedError(403, f"Not allowed: {exc}.") from None
        if done is None:
            return self.site.redirect("/people", "No pending request has that code.")
        await self.site.audit(me, "pairing." + ("approve" if approve else "deny"), code, done)
        return self.site.redirect("/people", done)

    async def _role(self, request: web.Request, me: Operator) -> web.StreamResponse:
        form = await form_of(request)
        user_id, role = form.get("user", ""), form.get("role", "")
        if role not in ROLES:
            raise RefusedError(400, "Unknown role.")
        await self._may_off_loop(me, Action.SET_ROLE, user_id, role=role)
        refused = await self._off_loop(lambda: self.people.set_role(user_id, role, by=me.user_id))
        if refused is not None:
            return self.site.redirect("/people", f"Not changed: {refused}.")
        await self.site.audit(me, "role", user_id, role)
        name = await self._off_loop(lambda: name_of(self.db, user_id))
        return self.site.redirect("/people", f"{name} is now {role}.")

    async def _block(self, request: web.Request, me: Operator) -> web.StreamResponse:
        form = await form_of(request)
        user_id, blocked = form.get("user", ""), form.get("blocked") == "yes"
        await self._may_off_loop(me, Action.BLOCK, user_id)
        name = await self._off_loop(lambda: name_of(self.db, user_id))
        if blocked:
            detail = "The assistant stops answering them on every platform until unblocked."
            asked = self.unless_sure(
                request, me, form, f"Block {name}?", yes="Block", detail=detail
            )
            if asked is not None:
                return asked
        refused = await self._off_loop(
            lambda: self.people.set_blocked(user_id, blocked=blocked, by=me.user_id)
        )
        if refused is not None:
            return self.site.redirect("/people", f"Not changed: {refused}.")
        await self.site.audit(me, "block" if blocked else "unblock", user_id)
        return self.site.redirect("/people", f"{name} is {'blocked' if blocked else 'unblocked'}.")

    async def _link_code(self, request: web.Request, me: Operator) -> web.StreamResponse:
        """A link code for the operator's own account (to link it with their other
        accounts); never for someone else, whom it would let the operator become."""
        form = await form_of(request)
        user_id = form.get("user", "") or me.user_id
        await self._may_off_loop(me, Action.LINK_CODE, user_id)
        code = await self._off_loop(lambda: self.people.link_code(user_id, by=me.user_id))
        await self.site.audit(me, "link-code", user_id)
        note = (
            f"Your link code: {code} (send /link {code} from your other account within 10 minutes)."
        )
        return self.site.redirect("/people", note, code=code)

    async def _may_off_loop(
        self, me: Operator, action: Action, user_id: str, *, role: str | None = None
    ) -> None:
        """`_may` from a request's handler (it reads state.db: off the event loop)."""
        await self._off_loop(lambda: self._may(me, action, user_id, role=role))

    def _may(self, me: Operator, action: Action, user_id: str, *, role: str | None = None) -> None:
        """The one decision (People.may), as the page's answer: 404 for nobody, 403 with
        the reason for what this operator may not do."""
        if self.db.people.get_user(user_id) is None:
            raise RefusedError(404, "No such person.")
        if (refused := self.people.may(me.user_id, action, user_id, role=role)) is not None:
            raise RefusedError(403, f"Not allowed: {refused}.")

    # -- memory ----------------------------------------------------------------------------

    async def _memory_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        wanted = request.query.get("user", "") or me.user_id
        older = request.query.get("runs_before", "")
        before = int(older) if older.isdigit() else None
        values = await self._off_loop(lambda: self._memory_values(me, wanted, before))
        return self.show(request, me, "memory.html", **values)

    def _consolidations(
        self, user_id: str, before: int | None, history: list[Any]
    ) -> dict[str, Any]:
        """A page of the person's consolidation runs, each with the change it made (by
        its id), and where the next older page starts."""
        log = self.db.memory_log
        runs = log.consolidation_runs(user_id, RUNS_PAGE + 1, before)
        older = runs[RUNS_PAGE - 1].id if len(runs) > RUNS_PAGE else None
        runs = runs[:RUNS_PAGE]
        linked = log.versions(user_id, [r.version_id for r in runs if r.version_id])
        legacy = [v for v in history if v.actor == "consolidator" and v.id not in linked]
        return {"runs": _runs(runs, linked, legacy), "runs_older": older}

    def _memory_values(
        self, me: Operator, user_id: str, before: int | None = None
    ) -> dict[str, Any]:
        self._may(me, Action.READ_MEMORY, user_id)
        # where an entry came from quotes what the person said: shown to whoever may read
        # their conversations (the one privacy rule), named without it to the others
        quotes = self.people.may(me.user_id, Action.READ_CONVERSATIONS, user_id) is None
        users = self.db.people.users()
        memory = self.memory.of(user_id)
        stores = []
        threshold = self.parts.config.memory.consolidation.threshold
        for status in self.memory.status(user_id):
            target = status.target
            if not status.enabled:
                stores.append({"status": status, "target": target, "entries": [], "prompt": ""})
                continue
            state = memory.file_store(target).read()
            entries = []
            for entry in state.entries:
                why = self.memory.why(user_id, entry[:80], limit=1)
                entries.append({"text": display_entry(entry), "raw": entry, "why": why[:1]})
            stores.append(
                {
                    "status": status,
                    "target": target,
                    "entries": entries,
                    "pending": state.pending,
                    "prompt": render(target, state),
                    "low": round(status.limit * threshold),
                }
            )
        history = self.db.memory_log.history(user_id, 30)
        consolidation = [self.db.memory_log.consolidation_state(user_id, t.value) for t in Target]
        last = self.db.memory_log.last_version(user_id)
        return {
            "last_change": _change_of(last) if last is not None else "",
            "users": users,
            "person_names": {s.user.id: person_name(s) for s in users},
            "user_id": user_id,
            "stores": stores,
            "history": history,
            "consolidation": consolidation,
            **self._consolidations(user_id, before, history),
            "targets": list(Target),
            "quotes": quotes,
        }

    async def _memory_add(self, request: web.Request, me: Operator) -> web.StreamResponse:
        form = await form_of(request)
        user_id, content = form.get("user", ""), form.get("content", "").strip()
        target = form.get("target", "memory")
        args = {"action": "add", "target": target, "content": content}
        return await self._memory_write(me, user_id, args, f"Added to {target}.")

    async def _memory_remove(self, request: web.Request, me: Operator) -> web.StreamResponse:
        form = await form_of(request)
        user_id, entry = form.get("user", ""), form.get("entry", "")
        target = form.get("target", "memory")
        args = {"action": "remove", "target": target, "old_text": entry}
        return await self._memory_write(me, user_id, args, "Removed.")

    async def _memory_write(
        self, me: Operator, user_id: str, args: dict[str, str], done: str
    ) -> web.StreamResponse:
        await self._may_off_loop(me, Action.EDIT_MEMORY, user_id)
        if args["target"] not in {t.value for t in Target}:
            raise RefusedError(400, "Unknown store.")
        outcome = await self.memory.apply(user_id, args, actor="admin")
        result = outcome.result
        if not result.get("success"):
            return self.site.redirect(
                "/memory", f"Not written: {result.get('error')}", user=user_id
            )
        detail = args.get("content") or args.get("old_text") or ""
        await self.site.audit(
            me, f"memory.{args['action']}", user_id, f"{args['target']}: {detail}"
        )
        return self.site.redirect("/memory", done, user=user_id)

    async def _memory_undo(self, request: web.Request, me: Operator) -> web.StreamResponse:
        user_id = (await form_of(request)).get("user", "")
        await self._may_off_loop(me, Action.EDIT_MEMORY, user_id)
        done, message = await self.memory.undo(user_id, actor="admin")
        if done:
            await self.site.audit(me, "memory.undo", user_id, message)
        return self.site.redirect("/memory", message, user=user_id)

    # -- sessions --------------------------------------------------------------------------

    async def _sessions_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        query = request.query.get("q", "")[:500]
        wanted = request.query.get("user", "")
        asked = request.query.get("page", "")
        page = max(1, min(int(asked), 10_000)) if asked.isdigit() else 1
        if wanted:
            await self._may_off_loop(me, Action.READ_CONVERSATIONS, wanted)
        embedder = self.parts.embedder
        vector = await embedder.query(query) if query.strip() and embedder is not None else None
        users, found, more = await self._off_loop(
            lambda: self._sessions_found(me, wanted, query, vector, page)
        )
        names = {s.user.id: person_name(s) for s in users}
        return self.show(
            request,
            me,
            "sessions.html",
            users=users,
            names=names,
            q=query,
            user=wanted,
            results=found,
            page_no=page,
            more=more,
        )

    def _sessions_found(
        self, me: Operator, wanted: str, query: str, vector: Any, page: int
    ) -> tuple[list[Any], list[dict[str, Any]], bool]:
        """One page of sessions, best first, across the people the reader may read
        (`authority.decide`, weighed on the listing's rows and the role checked for
        this request): with a query, ranked together by their best message's score
        (`search_people`); without one, the most recently active. Also: whether a next
        page has more."""
        users = self.db.people.users()
        if wanted:
            readable = [wanted]
        else:
            actor, party_of = self.people.party_of(me.user_id, me.role), self.people.party_of
            readable = [
                s.user.id
                for s in users
                if decide(actor, Action.READ_CONVERSATIONS, party_of(s.user.id, s.user.role))
                is None
            ]
        first = (page - 1) * SESSIONS_PAGE
        conversations = self.db.conversations
        if not query.strip():
            rows = conversations.list_sessions(
                None, limit=SESSIONS_PAGE + 1, among=readable, offset=first
            )
            shown = [_listed(row, row.last_active_at, []) for row in rows[:SESSIONS_PAGE]]
            return users, shown, len(rows) > SESSIONS_PAGE
        ranked: list[tuple[float, str, list[Any]]] = []
        found = conversations.search_people(readable, query, HITS_PER_PERSON, vector)
        for user_id, hits in sorted(found.items()):
            grouped: dict[str, list[Any]] = {}
            for hit in hits:
                grouped.setdefault(hit.session_id, []).append(hit)
            ranked += [(group[0].score, user_id, group) for group in grouped.values()]
        ranked.sort(key=lambda item: -item[0])
        page_of = ranked[first : first + SESSIONS_PAGE]
        chats = conversations.sessions_of([(group[0].session_id, who) for _, who, group in page_of])
        shown = []
        for _score, _user_id, group in page_of:
            chat = chats.get(group[0].session_id)
            if chat is None:  # gone since the search
                continue
            lines = [f"{h.role}: {snippet(h.content, h.terms, 90)}" for h in group[:3]]
            shown.append(_listed(chat, chat.started_at, lines))
        return users, shown, len(ranked) > first + SESSIONS_PAGE

    def _conversation(self, request: web.Request, me: Operator) -> tuple[Any, list[Any], str]:
        session_id = request.match_info["session_id"]
        user_id = request.query.get("user", "") or me.user_id
        self._may(me, Action.READ_CONVERSATIONS, user_id)
        chat = self.db.conversations.get_session(session_id, user_id)
        if chat is None:
            raise RefusedError(404, "No such session for that person.")
        return chat, self.db.conversations.messages(chat.id, user_id), user_id

    async def _session_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        chat, messages, user_id = await self._off_loop(lambda: self._conversation(request, me))
        shown = [m for m in messages if m.role in ("user", "assistant") and m.content]
        name = await self._off_loop(lambda: name_of(self.db, user_id))
        return self.show(
            request, me, "session.html", chat=chat, messages=shown, user=user_id, owner_name=name
        )

    async def _session_delete(self, request: web.Request, me: Operator) -> web.StreamResponse:
        """Forget one session (asked first): its owner's own, or anyone's for an owner."""
        form = await form_of(request)
        session_id = request.match_info["session_id"]
        user_id = form.get("user", "") or me.user_id
        await self._may_off_loop(me, Action.DELETE_CONVERSATIONS, user_id)
        chat = await self._off_loop(lambda: self.db.conversations.get_session(session_id, user_id))
        if chat is None:
            raise RefusedError(404, "No such session for that person.")
        title = chat.title or chat.id
        detail = (
            f"Its {chat.message_count} messages are gone for good (export it first to keep "
            "a copy). Memory is not changed. If they are writing in it now, their next "
            "message starts a new conversation."
        )
        asked = self.unless_sure(
            request, me, form, f"Delete the session “{title}”?", yes="Delete it", detail=detail
        )
        if asked is not None:
            return asked
        gone = await self._off_loop(
            lambda: self.db.conversations.delete_session(session_id, user_id)
        )
        if not gone:
            return self.site.redirect("/sessions", "That session was already gone.")
        await self.site.audit(me, "session.delete", user_id, f"{session_id}: {title}")
        return self.site.redirect("/sessions", f"Deleted the session “{title}”.", user=user_id)

    async def _session_export(self, request: web.Request, me: Operator) -> web.StreamResponse:
        chat, messages, user_id = await self._off_loop(lambda: self._conversation(request, me))
        markdown = request.query.get("format") == "md"
        body = (
            export_markdown(chat, messages)
            if markdown
            else "".join(line + "\n" for line in export_lines(chat, messages))
        )
        await self.site.audit(me, "session.export", user_id, chat.id)
        name = f"{chat.id}.{'md' if markdown else 'jsonl'}"
        response = web.Response(
            text=body, content_type="text/markdown" if markdown else "application/jsonl"
        )
        response.headers["Content-Disposition"] = f'attachment; filename="{name}"'
        response.headers["Cache-Control"] = "no-store"
        return response

    # -- reminders -------------------------------------------------------------------------

    async def _reminders_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        query = request.query
        wanted, text = query.get("user", "")[:64], query.get("q", "")[:200].strip()
        asked = query.get("page", "")
        page = max(1, min(int(asked), 100_000)) if asked.isdigit() else 1
        values = await self._off_loop(lambda: self._reminder_values(me, wanted, text, page))
        return self.show(request, me, "reminders.html", user=wanted, q=text, **values)

    def _reminder_values(self, me: Operator, wanted: str, text: str, page: int) -> dict[str, Any]:
        """A page of the live reminders, the next due first, with whose they are (by
        name), when next (in their time and from now) and whether this operator may
        cancel each."""
        live = self.db.reminders.of_user(None, live_only=True)
        items = [r for r in live if not wanted or r.user_id == wanted]
        if text:
            folded = text.casefold()
            items = [r for r in items if folded in r.text.casefold()]
        users = {s.user.id: s for s in self.db.people.users()}
        names = {user_id: person_name(summary) for user_id, summary in users.items()}
        pages = max(1, -(-len(items) // REMINDERS_PAGE))
        page = min(page, pages)
        shown = items[(page - 1) * REMINDERS_PAGE : page * REMINDERS_PAGE]
        actor = self.people.party_of(me.user_id, me.role)
        now = datetime.now(UTC)
        rows = []
        for r in shown:
            them = (
                self.people.party_of(r.user_id, users[r.user_id].user.role)
                if r.user_id in users
                else None
            )
            due = as_utc(r.due_at) if r.due_at else None
            rows.append(
                {
                    "r": r,
                    "name": names.get(r.user_id, r.user_id),
                    "next": f"{local(r.due_at, r.timezone)} {r.timezone}" if r.due_at else "-",
                    "in": (due - now).total_seconds() if due else None,
                    "may_cancel": decide(actor, Action.CANCEL_REMINDER, them) is None,
                }
            )
        whose = sorted({r.user_id for r in live})
        return {
            "rows": rows,
            "people": [(user_id, names.get(user_id, user_id)) for user_id in whose],
            "found": len(items),
            "first": (page - 1) * REMINDERS_PAGE + 1,
            "page_no": page,
            "pages": pages,
        }

    async def _reminder_cancel(self, request: web.Request, me: Operator) -> web.StreamResponse:
        form = await form_of(request)
        reminder_id = form.get("id", "")
        found = await self._off_loop(lambda: self.db.reminders.get(reminder_id))
        if found is not None:
            await self._may_off_loop(me, Action.CANCEL_REMINDER, found.user_id)
            question = f"Cancel the reminder “{found.text[:80]}”?"
            asked = self.unless_sure(request, me, form, question, yes="Cancel it")
            if asked is not None:
                return asked
        gone = await self._off_loop(lambda: self.db.reminders.cancel(reminder_id))
        if gone is None:
            return self.site.redirect("/reminders", "No live reminder has that id.")
        await self.site.audit(me, "reminder.cancel", gone.user_id, f"{gone.id}: {gone.text[:100]}")
        return self.site.redirect("/reminders", f"Cancelled {gone.id}.")

    # -- tools -----------------------------------------------------------------------------

    def _tool_rows(self) -> list[dict[str, Any]]:
        parts = self.parts
        table = parts.tools_table if parts.tools_table is not None else parts.config.tools
        present = parts.tool_groups or capabilities.groups(
            provider=bool(parts.config.memory.provider),
            web=not extras.missing("web"),
            mcp_servers=list(parts.config.mcp.servers),
        )
        named = [g for g in table if g not in present]
        return [
            {
                "group": group,
                "who": ", ".join(capabilities.who_may(group, table)) or "nobody",
                "said": capabilities.describe(capabilities.who_may(group, table)),
                "default": group not in table,
                "what": capabilities.summary(group),
            }
            for group in [*present, *named]
        ]

    def _mcp_rows(self) -> list[dict[str, Any]]:
        """Each MCP server configured: where it runs, its state in the running gateway
        (running with its tools, failed and why, not started yet: started at its first
        use), who may use its tools."""
        parts, hub = self.parts, self.parts.mcp
        states = hub.states() if hub is not None else {}
        table = parts.tools_table if parts.tools_table is not None else parts.config.tools
        rows = []
        for name, server in sorted(parts.config.mcp.servers.items()):
            where = server.url or " ".join([server.command or "", *server.args])
            state = states.get(name, "not started") if hub else "no gateway runs in this process"
            rows.append(
                {
                    "name": name,
                    "where": where,
                    "state": state,
                    "bad": state.startswith(("failed", "not configured")),
                    "tools": hub.listed(name) if hub is not None else [],
                    "who": capabilities.describe(capabilities.who_may(f"mcp:{name}", table)),
                }
            )
        return rows

    async def _tools_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        actor = self.people.party_of(me.user_id, me.role)
        return self.show(
            request,
            me,
            "tools.html",
            rows=self._tool_rows(),
            servers=self._mcp_rows(),
            may_change=decide(actor, Action.CHANGE_TOOLS) is None,
            live=self.parts.tools_table is not None,
        )

    async def _mcp_check(self, request: web.Request, me: Operator) -> web.StreamResponse:
        """Start one MCP server now (as its first use would) and say how it went: its
        tools, or why it did not start."""
        actor = self.people.party_of(me.user_id, me.role)
        if (refused := decide(actor, Action.CHANGE_TOOLS)) is not None:
            raise RefusedError(403, f"Not allowed: {refused}.")
        form = await form_of(request)
        name, hub = form.get("server", ""), self.parts.mcp
        if hub is None:
            return self.site.redirect(
                "/tools", "No gateway runs in this process: hermes mcp test NAME checks a server."
            )
        if name not in hub.names:
            return self.site.redirect("/tools", "No such MCP server.")
        found = await hub.tools(name)
        state = hub.states().get(name, "")
        if found:
            listed = ", ".join(t.name for t in found)
            return self.site.redirect("/tools", f"MCP server {name}: {state}: {listed}.")
        return self.site.redirect("/tools", f"MCP server {name} did not start: {state}.")

    async def _tools_set(self, request: web.Request, me: Operator) -> web.StreamResponse:
        """Who may use one tool group: written to config.yaml (validated, comments kept)
        and, in a running gateway, used from the next turn on."""
        actor = self.people.party_of(me.user_id, me.role)
        if (refused := decide(actor, Action.CHANGE_TOOLS)) is not None:
            raise RefusedError(403, f"Not allowed: {refused}.")
        form = await form_of(request)
        reset = form.get("reset") == "yes"
        try:
            group = capabilities.check_group(form.get("group", ""))
            entries = capabilities.simplest(
                capabilities.check_entry(e) for e in form.get("who", "").replace(",", " ").split()
            )
        except ValueError as exc:
            return self.site.redirect("/tools", f"Not changed: {exc}.")
        value: object = REMOVE if reset else entries
        try:
            await self._off_loop(lambda: update_config(self.parts.home, {("tools", group): value}))
        except ConfigError as exc:
            return self.site.redirect("/tools", f"Not changed: {exc}")
        if self.parts.tools_table is not None:
            if reset:
                self.parts.tools_table.pop(group, None)
            else:
                self.parts.tools_table[group] = entries
        who = capabilities.who_may(group, {} if reset else {group: entries})
        said = capabilities.describe(who)
        await self.site.audit(
            me, "tools", group, "default" if reset else ", ".join(entries) or "nobody"
        )
        return self.site.redirect("/tools", f"{group}: {said}.")

    # -- usage -----------------------------------------------------------------------------

    async def _usage_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        query = request.query
        asked = query.get("days", "30")
        days = int(asked) if asked.isdigit() and int(asked) in usage.SPANS else 30
        user = query.get("user", "")[:64]
        number = query.get("page", "")
        page = max(1, min(int(number), 100_000)) if number.isdigit() else 1
        values = await self._off_loop(lambda: self._usage_values(days, user, page))
        return self.show(request, me, "usage.html", days=days, spans=usage.SPANS, **values)

    def _usage_values(self, days: int, user: str, page: int) -> dict[str, Any]:
        """Tokens and cost over `days` days: per day (a chart), per person (a page of
        them, the most first) and per model; one person's when `user` names one."""
        names = {s.user.id: person_name(s) for s in self.db.people.users()}
        user = user if user in names else ""
        today = datetime.now(UTC).date()
        found = usage.report(self.db, self.parts.config.llm, today, days, user)
        pages = max(1, -(-len(found.people) // USAGE_PAGE))
        page = min(page, pages)
        return {
            "report": found,
            "user": user,
            "names": names,
            "shown": found.people[(page - 1) * USAGE_PAGE : page * USAGE_PAGE],
            "first": (page - 1) * USAGE_PAGE + 1,
            "page_no": page,
            "pages": pages,
        }

    # -- gateways --------------------------------------------------------------------------

    async def _gateways_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        asked = request.query.get("span", "")
        span = asked if asked in health.SPANS else "24h"
        values = await self._off_loop(lambda: self._gateways_values(span))
        return self.show(request, me, "gateways.html", span=span, spans=health.SPANS, **values)

    def _gateways_values(self, span: str) -> dict[str, Any]:
        """The gateway instances (each one's heartbeat, platforms and leases) and each
        platform's health over `span`: uptime, outages, a strip chart."""
        parts = self.parts
        now = datetime.now(UTC)
        since = now - health.SPANS[span]
        found = gateways(parts.home, parts.config, self.db)
        platforms = self._platform_health(since, now)
        return {
            "gateways": found,
            "platforms": platforms,
            "strips": {p.name: p.strip(since, now) for p in platforms},
            "since": since,
            "now": now,
            "strip": {"width": health.WIDTH, "height": health.HEIGHT},
        }

    def _platform_health(self, since: datetime, now: datetime) -> list[health.PlatformHealth]:
        spans = self.db.platform_health.spans(since)
        return health.health(spans, since, now, open_within=OPEN_WITHIN)

    # -- scheduler -------------------------------------------------------------------------

    async def _scheduler_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        job = request.query.get("job", "")[:64]
        asked = request.query.get("before", "")
        before = int(asked) if asked.isdigit() else None
        values = await self._off_loop(lambda: self._scheduler_values(job, before))
        actor = self.people.party_of(me.user_id, me.role)
        return self.show(
            request,
            me,
            "scheduler.html",
            may_control=decide(actor, Action.CONTROL_JOBS) is None,
            live=self.parts.runtime is not None,
            **values,
        )

    def _scheduler_values(self, job: str, before: int | None) -> dict[str, Any]:
        """Each job with its controls, and a page of runs (of one job, or all), newest
        first, each naming who asked for it."""
        jobs = read_status(self.parts.home, self.parts.config, self.db)
        known = job if any(j.id == job for j in jobs) else ""
        runs = self.db.jobs.history(known, limit=SCHEDULER_RUNS + 1, before=before)
        people = {s.user.id: person_name(s) for s in self.db.people.users()}
        return {
            "job": known,
            "jobs": jobs,
            "runs": runs[:SCHEDULER_RUNS],
            "older": runs[SCHEDULER_RUNS - 1].id if len(runs) > SCHEDULER_RUNS else None,
            "names": people,
        }

    async def _scheduler_control(self, request: web.Request, me: Operator) -> web.StreamResponse:
        """Pause, resume or ask for a run of one job: written to state.db, where every
        gateway of the database reads it (gateway/scheduler.py), and audited."""
        actor = self.people.party_of(me.user_id, me.role)
        if (refused := decide(actor, Action.CONTROL_JOBS)) is not None:
            raise RefusedError(403, f"Not allowed: {refused}.")
        form = await form_of(request)
        job, what = form.get("job", ""), form.get("what", "")
        try:
            said = await self._off_loop(
                lambda: control(self.db, self.parts.config, job, what, me.user_id)
            )
        except ValueError as exc:
            return self.site.redirect("/scheduler", f"Not done: {exc}.")
        await self.site.audit(me, "scheduler", job, what)
        return self.site.redirect("/scheduler", f"{said}.", job=job)

    # -- logs ------------------------------------------------------------------------------

    def _log_query(self, request: web.Request) -> LogQuery:
        """The Logs page's filter, from its address (what the form and its links set)."""
        query = request.query
        level = query.get("level", "info")
        level = level if level in LOG_LEVELS else "info"
        since = query.get("since", "24h")
        since = since if since in LOG_SINCE else "24h"
        try:
            count = max(1, min(int(query.get("n", "200")), LOG_MAX_LINES))
        except ValueError:
            count = 200
        before = _position(query.get("before", ""))
        stored = self.parts.config.logging.stored_levels()
        return LogQuery(
            level=level,
            since=since,
            text=query.get("q", "")[:200],
            turn=query.get("turn", "")[:40].strip(),
            instance=query.get("instance", "")[:200].strip(),
            n=count,
            before=before,
            stored=bool(stored) and LOG_LEVELS[level] >= min(stored),
        )

    def _log_lines(self, asked: LogQuery) -> tuple[list[str], str | None]:
        """The lines asked for, newest last, and where the next older page starts (the
        stored lines' id; None: no older page). Stored levels come from state.db (every
        instance, across restarts); lower ones from this process's recent lines."""
        age = LOG_SINCE[asked.since]
        if not asked.stored:
            since = time.time() - age.total_seconds() if age is not None else 0.0
            lines = RECENT.last(
                asked.n, LOG_LEVELS[asked.level], asked.turn, since=since, text=asked.text
            )
            return [line.text for line in lines], None
        wanted = LogFilter(
            level=LOG_LEVELS[asked.level],
            since=datetime.now(UTC) - age if age is not None else None,
            turn=asked.turn,
            instance=asked.instance,
            text=asked.text,
            before=asked.before,
        )
        rows = self.db.logs.find(wanted, asked.n + 1)
        last = rows[asked.n - 1] if len(rows) > asked.n else None
        older = f"{as_utc(last.at).timestamp():.6f}_{last.id}" if last is not None else None
        return [_log_text(row) for row in reversed(rows[: asked.n])], older

    async def _logs_page(self, request: web.Request, me: Operator) -> web.StreamResponse:
        asked = self._log_query(request)
        lines, older = await self._off_loop(lambda: self._log_lines(asked))
        follow = request.query.get("follow") == "1" and asked.before is None
        here = {k: v for k, v in asked.address().items() if k != "before"}
        return self.show(
            request,
            me,
            "logs.html",
            lines=lines,
            asked=asked,
            older=urlencode({**here, "before": older}) if older is not None else "",
            here=urlencode(here),
            follow=follow,
            refresh=LOG_FOLLOW_S if follow else 0,
            levels=list(LOG_LEVELS),
            spans=list(LOG_SINCE),
            stored_levels=[
                logging.getLevelName(level).lower()
                for level in sorted(self.parts.config.logging.stored_levels())
            ],
        )

    async def _logs_export(self, request: web.Request, me: Operator) -> web.StreamResponse:
        """The lines the page shows, as a text file (up to LOG_MAX_LINES)."""
        asked = self._log_query(request)
        lines, _older = await self._off_loop(lambda: self._log_lines(asked))
        await self.site.audit(me, "logs.export", asked.level, urlencode(asked.address()))
        response = web.Response(text="".join(line + "\n" for line in lines))
        name = f"hermes-log-{datetime.now(UTC):%Y%m%d-%H%M}.txt"
        response.headers["Content-Disposition"] = f'attachment; filename="{name}"'
        response.headers["Cache-Control"] = "no-store"
        return response


@dataclass(frozen=True, slots=True)
class PeopleQuery:
    """The People page's filter and page, from its address."""

    text: str = ""
    role: str = ""
    access: str = ""
    sort: str = "seen"
    page: int = 1

    @classmethod
    def of(cls, query: Mapping[str, str]) -> PeopleQuery:
        asked = query.get("page", "")
        return cls(
            text=query.get("q", "")[:200].strip(),
            role=role if (role := query.get("role", "")) in ROLES else "",
            access=access if (access := query.get("access", "")) in ACCESS else "",
            sort="name" if query.get("sort") == "name" else "seen",
            page=max(1, min(int(asked), 100_000)) if asked.isdigit() else 1,
        )

    def finds(self, summary: Any) -> bool:
        user = summary.user
        if (self.role and user.role != self.role) or (self.access and user.status != self.access):
            return False
        if not self.text:
            return True
        said = self.text.casefold()
        words = [user.id, user.display_name]
        for i in summary.identities:
            words += [f"{i.platform}:{i.platform_user_id}", i.display_name]
        return any(said in word.casefold() for word in words if word)

    def address(self) -> dict[str, str]:
        found = {"q": self.text, "role": self.role, "access": self.access, "sort": self.sort}
        found = {k: v for k, v in found.items() if v and not (k == "sort" and v == "seen")}
        return {**found, "page": str(self.page)}


def name_of(db: SessionDB, user_id: str) -> str:
    """`person_name` of one person, by id (the id itself when there is no such person)."""
    user = db.people.get_user(user_id)
    if user is None:
        return user_id
    return person_name(SimpleNamespace(user=user, identities=db.people.identities_of(user_id)))


def person_name(summary: Any) -> str:
    """What to call someone: their name, else a linked account's name, else the account
    itself (a person made before their first message), else their id."""
    if summary.user.display_name:
        return str(summary.user.display_name)
    for i in summary.identities:
        if i.display_name:
            return str(i.display_name)
    for i in summary.identities:
        return f"{i.platform}:{i.platform_user_id}"
    return str(summary.user.id)


@dataclass(frozen=True, slots=True)
class LogQuery:
    level: str
    since: str
    text: str
    turn: str
    instance: str
    n: int
    before: tuple[datetime, int] | None
    stored: bool  # from state.db (a level kept there), else this process's recent lines

    def address(self) -> dict[str, str]:
        """The query string that asks for this again."""
        found = {"level": self.level, "since": self.since, "n": str(self.n)}
        for key, value in (("q", self.text), ("turn", self.turn), ("instance", self.instance)):
            if value:
                found[key] = value
        if self.before is not None:
            at, row_id = self.before
            found["before"] = f"{at.timestamp():.6f}_{row_id}"
        return found


def _position(said: str) -> tuple[datetime, int] | None:
    """An older page's start, as its link says it ("<timestamp>_<id>"); None if not one."""
    stamp, _, row_id = said.partition("_")
    try:
        return datetime.fromtimestamp(float(stamp), UTC), int(row_id)
    except (ValueError, OverflowError, OSError):
        return None


def _log_text(row: LogRecord) -> str:
    """A stored line as the log writes one (with the instance that logged it)."""
    turn = f" [turn {row.turn}]" if row.turn else ""
    level = logging.getLevelName(row.level)
    where = f"{row.logger}{turn} ({row.instance})"
    return f"{as_utc(row.at):%Y-%m-%d %H:%M:%S} {level} {where}: {row.message}"


def _listed(chat: Any, when: Any, snippets: list[str]) -> dict[str, Any]:
    """A session as the Sessions page lists it."""
    return {
        "session_id": chat.id,
        "user_id": chat.user_id,
        "title": chat.title,
        "platform": chat.platform,
        "when": when.date().isoformat(),
        "snippets": snippets,
    }


def _runs(runs: list[Any], linked: dict[int, Any], legacy: list[Any]) -> list[dict[str, Any]]:
    """Each consolidation with its outcome; an applied one with the change it made (the
    version of its `version_id`) and every dropped entry's reason. A run recorded before
    runs named their change (schema 19) takes the nearest consolidator change of its
    store within 5 s that no other run took."""
    out = []
    taken: set[int] = set()
    for run in runs:
        found = linked.get(run.version_id) if run.version_id else None
        if found is None and run.version_id is None and run.status == "applied":
            near = [
                (abs((v.created_at - run.at).total_seconds()), v)
                for v in legacy
                if v.target == run.target and v.id not in taken
            ]
            near = [(gap, v) for gap, v in near if gap < 5]
            if near:
                found = min(near, key=lambda pair: pair[0])[1]
                taken.add(found.id)
        dropped: list[Any] = []
        if found is not None:
            try:
                dropped = list(json.loads(found.reason or "{}").get("dropped") or [])
            except (ValueError, AttributeError):
                dropped = []
        out.append({"run": run, "version": found, "dropped": dropped})
    return out


def _counted(sources: list[Any]) -> dict[str, int]:
    """Errors and warnings logged, by word."""
    counts = {"error": 0, "warning": 0}
    for source in sources:
        counts["error" if source.level >= logging.ERROR else "warning"] += source.count
    return counts


def _nonce() -> str:
    return secrets.token_urlsafe(24)


def _change_of(version: MemoryVersion) -> str:
    """What one store change did, in words (what Undo would revert)."""
    before, after = entries_of(version.text_before), entries_of(version.text_after)
    added = [e for e in after if e not in before]
    removed = [e for e in before if e not in after]

    def quoted(entry: str) -> str:
        text = display_entry(entry)
        return f"“{text[:60]}…”" if len(text) > 60 else f"“{text}”"

    if version.actor == "consolidator":
        what = f"a consolidation ({len(before)} → {len(after)} entries)"
    elif added and removed:
        what = f"{quoted(removed[0])} replaced by {quoted(added[0])}"
    elif added:
        what = f"{quoted(added[0])} added"
    elif removed:
        what = f"{quoted(removed[0])} removed"
    else:
        what = "a change"
    return f"{what} in {version.target}, by {version.actor}"


__all__ = ["CredentialsError", "Dashboard", "Parts"]
