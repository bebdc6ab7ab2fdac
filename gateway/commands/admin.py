"""The `/admin` commands (the table makes them admin-only and DM-only): the running
process, everyone known, another person's memory usage, pairing and access rules."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

from gateway.admission.authority import Action
from gateway.admission.people import People
from gateway.commands.context import CommandContext, RuntimeInfo
from gateway.commands.memory import MemoryCommands, provider_line
from gateway.config import HermesConfig, dashboard_refusal
from gateway.scheduler import read_status
from hermes.embedder import Embedder
from hermes.state.db import SessionDB
from hermes.state.models import AccessRule


class AdminCommands:
    def __init__(
        self,
        home: Path,
        config: HermesConfig,
        db: SessionDB,
        people: People,
        memory_commands: MemoryCommands,
        *,
        embedder: Embedder | None = None,
    ) -> None:
        self.home, self.config, self.db, self.people = home, config, db, people
        self.memory_commands = memory_commands
        self.embedder = embedder
        self.runtime: RuntimeInfo | None = None  # what the running process knows of itself
        self.mcp_states: Callable[[], dict[str, str]] = dict  # each MCP server's state

    async def status(self, ctx: CommandContext, _: str) -> str:
        runtime = self.runtime
        uptime = runtime.uptime_s() if runtime else None
        states = runtime.adapter_states() if runtime else {}
        stored = await self.db.run(self._stored_status, ctx)  # what state.db says
        health = await runtime.llm_health() if runtime else "not checked"
        embedder = self.embedder
        return "\n".join(
            [
                f"Uptime: {duration(uptime) if uptime is not None else 'no gateway running'}",
                "Platforms: "
                + (", ".join(f"{name} {state}" for name, state in states.items()) or "none"),
                stored[0],
                *stored[1],
                f"LLM endpoint: {health}",
                f"Search: hybrid {embedder.status_line()}" if embedder else "Search: lexical",
                *stored[2],
                *(f"MCP server {name}: {state}" for name, state in self.mcp_states().items()),
            ]
        )

    def _stored_status(self, ctx: CommandContext) -> tuple[str, list[str], list[str]]:
        """/admin status's lines from the database (on its executor): the counts, the
        jobs; the memory provider and the instances."""
        users, today = self.people.repo.counts()
        size = self.db.upkeep.size_bytes()  # on PostgreSQL too
        counts = f"Users: {users} · sessions today: {today} · state.db: {size / 1e6:.1f} MB"
        jobs = []
        for job in read_status(self.home, self.config, self.db):
            when = f"{job.next_run:%Y-%m-%d %H:%M} UTC" if job.next_run else "not scheduled"
            last = {None: "", True: " (last ok)", False: " (last FAILED)"}[job.last_ok]
            jobs.append(f"Job {job.id}: next {when}{last}")
        rest = []
        host = self.memory_commands.memory.providers
        if self.config.memory.provider:  # its reachability, writes waiting, the last error
            status = host.status(ctx.person.user_id, everyone=True)
            rest.append(f"Memory provider: {provider_line(status)}")
        if self.db.backend == "postgresql":
            rest += self._instances()
        return counts, jobs, rest

    def _instances(self) -> list[str]:
        """Every gateway instance on the database (several may share it)."""
        lease_s = self.config.gateway.cluster.lease_seconds
        found = [i for i in self.db.cluster.instances(lease_s) if i.alive]
        lines = [f"Instances: {len(found)} · events queued: {self.db.cluster.waiting()}"]
        now = datetime.now(UTC)
        for instance in found:
            sessions = sum(1 for name in instance.leases if name.startswith("session:"))
            held = [name for name in instance.leases if not name.startswith("session:")]
            platforms = dict(instance.info.get("platforms") or {})
            beat = (now - instance.heartbeat_at).total_seconds()
            lines.append(
                f"- {instance.id} (pid {instance.pid}): heartbeat {beat:.0f} s ago, "
                f"sessions {sessions}"
                + (f", holds {', '.join(held)}" if held else "")
                + (
                    "; " + ", ".join(f"{name} {state}" for name, state in platforms.items())
                    if platforms
                    else ""
                )
            )
        return lines

    async def dashboard(self, ctx: CommandContext, _: str) -> str:
        """A one-time login link to the web dashboard, for this owner or admin only."""
        section = self.config.dashboard
        if (refusal := dashboard_refusal(self.config)) is not None:
            return f"The dashboard is off: {refusal}."
        address = self.runtime.dashboard_url() if self.runtime is not None else None
        if address is None:
            return (
                "No dashboard is served for this home now: start the gateway (or "
                "`hermes dashboard`) and ask again."
            )
        token = await self.db.run(
            self.db.dashboard.create_link,
            ctx.person.user_id,
            timedelta(minutes=section.link_minutes),
        )
        link = f"{address}login?{urlencode({'token': token})}"
        where = (
            ""
            if section.public_url
            else " (it listens on the server only: open an SSH tunnel to its port first)"
        )
        return (
            f"Your dashboard login link, good once for {section.link_minutes:g} minutes"
            f"{where}:\n{link}\nDo not share it: it logs in as you."
        )

    async def users(self, _ctx: CommandContext, _: str) -> str:
        return await self.db.run(self._users)

    def _users(self) -> str:
        lines = []
        for summary in self.people.repo.users():
            user = summary.user
            accounts = ", ".join(f"{i.platform}:{i.platform_user_id}" for i in summary.identities)
            last = f"{summary.last_active:%Y-%m-%d}" if summary.last_active else "never"
            flag = " BLOCKED" if user.status == "blocked" else ""
            lines.append(
                f"• `{user.id}` {user.display_name or '-'} ({user.role}{flag}) — "
                f"{accounts or 'no accounts'} · {summary.sessions} sessions · last {last}"
            )
        return "\n".join(["Users:", *lines]) if lines else "No users yet."

    async def memory(self, ctx: CommandContext, who: str) -> str:
        return await self.db.run(self._memory, ctx, who)

    def _memory(self, ctx: CommandContext, who: str) -> str:
        user_id = self.people.repo.resolve(who)
        if user_id is None:
            return f"No user {who!r}: give a user id (u_…) or PLATFORM:ID."
        if refused := self.people.may(ctx.person.user_id, Action.READ_MEMORY, user_id):
            return f"Not allowed: {refused}."
        return f"Memory of `{user_id}`:\n" + self.memory_commands.status_text(user_id)

    async def approve(self, ctx: CommandContext, code: str) -> str:
        return await self.people.db.run(self._decide, ctx, code, approve=True)

    async def deny(self, ctx: CommandContext, code: str) -> str:
        return await self.people.db.run(self._decide, ctx, code, approve=False)

    def _decide(self, ctx: CommandContext, code: str, *, approve: bool) -> str:
        if not code:
            return "Give the pairing code: `/admin approve CODE`."
        try:
            done = self.people.decide_pairing(code, approve=approve, by=ctx.person.user_id)
        except PermissionError as exc:
            return f"Not allowed: {exc}."
        return done or "No pending request has that code (it may have expired after 1 hour)."

    async def allow(self, ctx: CommandContext, subject: str) -> str:
        return await self.db.run(self._rule, ctx, subject, "allow")

    async def block(self, ctx: CommandContext, subject: str) -> str:
        return await self.db.run(self._rule, ctx, subject, "block")

    def _rule(self, ctx: CommandContext, subject: str, rule: str) -> str:
        parsed = parse_subject(subject)
        if parsed is None:
            return f"Say `/admin {rule} PLATFORM:ID` (or PLATFORM:chat:ID for a group chat)."
        platform, kind, ident = parsed
        # an account of someone known: the same decision as blocking the person (an
        # admin acts on users only; the owner always stays reachable)
        known = self.people.repo.user_by_identity(platform, ident) if kind == "user" else None
        if known is not None and (
            refused := self.people.may(ctx.person.user_id, Action.BLOCK, known)
        ):
            return f"Not allowed for {platform}:{ident}: {refused}."
        self.people.access.set_rule(
            AccessRule(
                platform=platform,
                kind=kind,
                subject=ident,
                rule=rule,
                created_by=ctx.person.user_id,
            )
        )
        self.people.changed()
        what = "group chat" if kind == "chat" else "user"
        return f"{'Allowed' if rule == 'allow' else 'Blocked'} {platform} {what} {ident}."


def parse_subject(text: str) -> tuple[str, str, str] | None:
    """'telegram:123' -> (telegram, user, 123); 'slack:chat:C1' -> (slack, chat, C1)."""
    parts = text.strip().split(":")
    if len(parts) == 2 and all(parts):
        return parts[0].lower(), "user", parts[1]
    if len(parts) == 3 and parts[1].lower() in ("chat", "user") and parts[0] and parts[2]:
        return parts[0].lower(), parts[1].lower(), parts[2]
    return None


def duration(seconds: float) -> str:
    minutes, _ = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h {minutes}m" if days else f"{hours}h {minutes}m"
