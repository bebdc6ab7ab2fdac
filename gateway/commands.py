"""Chat commands as one table, the same on every platform and in the CLI chat.

Each row is data: name, summary, aliases, usage, and its guards (DM only, admin only,
open to strangers, runs at once). `Commands.run` enforces the guards once, for every
row and subcommand; `/help` and every platform's command menu (Telegram
setMyCommands, Discord application commands, Slack `/hermes help`) are generated from
the table. No command reaches the LLM except `/memory consolidate` (the consolidation
model's job). Replies are Markdown; delivery formats and chunks them per platform.
Personal content (memory entries, provenance, past sessions) and every admin command
answer only in direct messages and the CLI, never in a group chat.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gateway.config import HermesConfig
from gateway.people import People, Person
from gateway.ports import MenuEntry
from gateway.scheduler import read_status
from hermes.agent.agent import Agent
from hermes.agent.conversation import Surface
from hermes.linking import link_with_code, unlink_platform
from hermes.memory.render import display_entry
from hermes.memory.store import Target
from hermes.providers.base import NoProvider
from hermes.state.db import SessionDB
from hermes.state.models import AccessRule
from hermes.state.people import LINK_CODE_TTL
from hermes.state.search import SearchScope
from hermes.tools.session_search import SessionSearchTool

if TYPE_CHECKING:
    from gateway.intake import Admitted

logger = logging.getLogger(__name__)

DM_ONLY = "I only show that in a direct message, not in a group chat."
NOT_ADMIN = "That command needs an admin."
PROVIDER_NOTE = "built-in only (no external memory provider)"
RESET_REPLY = "Started a fresh conversation. I still remember what's in my memory."


class RuntimeInfo(Protocol):
    """What the running process knows about itself, for `/admin status`."""

    def uptime_s(self) -> float | None: ...

    def adapter_states(self) -> dict[str, str]: ...

    async def llm_health(self) -> str: ...


@dataclass(frozen=True, slots=True)
class CommandContext:
    person: Person
    surface: Surface
    session_id: str | None = None  # the conversation the command was sent in
    admitted: Admitted | None = None  # the event as intake admitted it (lanes need it)

    @property
    def private(self) -> bool:
        return self.surface.chat_type == "dm"


class SessionControl(Protocol):
    """What /new and /stop act on: the router's lanes."""

    def reset(self, ctx: CommandContext) -> None: ...

    def stop_turn(self, ctx: CommandContext) -> bool: ...


Handler = Callable[[CommandContext, str], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Command:
    """One row of the table. Guards are enforced by `Commands.run`, never by handlers."""

    name: str  # with its slash
    summary: str
    handler: Handler | None = None  # None: the row only groups its subcommands
    aliases: tuple[str, ...] = ()
    usage: str = ""  # the argument, as shown in /help
    dm_only: bool = False
    admin_only: bool = False
    strangers: bool = False  # open, with its argument, to people not admitted yet
    immediate: bool = False  # runs at once instead of waiting behind the running turn
    menu: bool = True  # listed in the platforms' command menus
    subcommands: tuple[Command, ...] = ()
    default: str = ""  # the subcommand run when none is given

    def find(self, word: str) -> Command | None:
        word = word.lower()
        return next((c for c in self.subcommands if word in (c.name, *c.aliases)), None)


def command_name(text: str) -> str:
    """'/Memory@hermes_bot show' -> '/memory'."""
    return text.split(maxsplit=1)[0].split("@", maxsplit=1)[0].lower() if text else ""


def _argument(text: str) -> str:
    parts = text.split(maxsplit=1)
    return parts[1].strip() if len(parts) > 1 else ""


class Commands:
    def __init__(
        self,
        home: Path,
        config: HermesConfig,
        db: SessionDB,
        agent: Agent,
        people: People,
        *,
        runtime: RuntimeInfo | None = None,
    ) -> None:
        self.home, self.config, self.db, self.agent = home, config, db, agent
        self.people, self.memory = people, agent.memories
        self.runtime = runtime
        self.sessions: SessionControl | None = None  # the router running us sets this
        self.table = self._table()
        self._index = {n: c for c in self.table for n in (c.name, *c.aliases)}

    def _table(self) -> tuple[Command, ...]:
        """Every command, in the order /help and the menus show them."""
        sub = Command
        return (
            Command("/help", "What I can do", self._help, aliases=("/start",)),
            Command("/whoami", "Your user id, role and linked accounts", self._whoami),
            Command("/new", "Start a fresh conversation", self._new, aliases=("/reset",)),
            Command("/stop", "Cancel the answer I'm working on", self._stop, immediate=True),
            Command(
                "/memory",
                "Memory: status, show, forget, why, undo, consolidate",
                default="status",
                usage="[status|show|forget|why|undo|consolidate]",
                subcommands=(
                    sub("status", "memory usage per store", self._memory_status),
                    sub(
                        "show",
                        "the entries",
                        self._memory_show,
                        usage="[memory|user]",
                        dm_only=True,
                    ),
                    sub(
                        "forget",
                        "remove the entry containing TEXT",
                        self._memory_forget,
                        usage="TEXT",
                        dm_only=True,
                    ),
                    sub(
                        "why",
                        "where an entry came from",
                        self._memory_why,
                        usage="TEXT",
                        dm_only=True,
                    ),
                    sub(
                        "undo",
                        "revert the last memory change (a consolidation too)",
                        self._memory_undo,
                        dm_only=True,
                    ),
                    sub("consolidate", "tidy a full memory now", self._memory_consolidate),
                ),
            ),
            Command(
                "/sessions",
                "Recent conversations, or search them",
                self._sessions,
                usage="[query]",
                dm_only=True,
            ),
            Command(
                "/link",
                "A code to link another account; /link CODE links this one",
                self._link,
                usage="[CODE]",
                dm_only=True,  # a code seen by a group could join a stranger to this person
                strangers=True,  # proving you are known elsewhere needs no approval
            ),
            Command(
                "/unlink",
                "Detach a linked account",
                self._unlink,
                usage="PLATFORM",
            ),
            Command(
                "/admin",
                "Admin commands (admins only)",
                admin_only=True,
                dm_only=True,  # user lists, memory usage and codes are not for a group
                subcommands=(
                    sub(
                        "status",
                        "uptime, platforms, users, jobs, model health",
                        self._admin_status,
                    ),
                    sub("users", "everyone who has talked to me", self._admin_users),
                    sub(
                        "memory",
                        "another user's memory usage (USER: u_… or platform:id)",
                        self._admin_memory,
                        usage="USER",
                    ),
                    sub("approve", "approve a pairing request", self._admin_approve, usage="CODE"),
                    sub("deny", "deny a pairing request", self._admin_deny, usage="CODE"),
                    sub(
                        "allow",
                        "allow a user (PLATFORM:chat:ID for a group)",
                        self._admin_allow,
                        usage="PLATFORM:ID",
                    ),
                    sub(
                        "block",
                        "block a user (PLATFORM:chat:ID for a group)",
                        self._admin_block,
                        usage="PLATFORM:ID",
                    ),
                ),
            ),
        )

    # -- the table as data for others ----------------------------------------------------

    def lookup(self, text: str) -> Command | None:
        return self._index.get(command_name(text)) if text.startswith("/") else None

    def immediate(self, text: str) -> bool:
        row = self.lookup(text)
        return row is not None and row.immediate

    def open_to_strangers(self, text: str) -> bool:
        row = self.lookup(text)
        return row is not None and row.strangers and bool(_argument(text))

    def menu(self) -> list[MenuEntry]:
        """The platforms' command menus (names without the slash)."""
        return [
            MenuEntry(c.name[1:], c.summary, takes_text=bool(c.usage or c.subcommands))
            for c in self.table
            if c.menu
        ]

    def help_text(self, person: Person) -> str:
        lines = ["**Commands**"]
        admin: list[str] = []
        for row in self.table:
            target = admin if row.admin_only else lines
            if row.admin_only:
                target.append("**Admin**")
            if row.handler is not None:
                target.append(_help_line(row.name, row))
            target += [_help_line(f"{row.name} {s.name}", s) for s in row.subcommands]
        if person.is_admin:
            lines += ["", *admin]
        return "\n".join(lines)

    # -- dispatch ------------------------------------------------------------------------

    async def run(self, ctx: CommandContext, text: str) -> str:
        row = self.lookup(text)
        if row is None:
            return f"I don't know {command_name(text)}. " + self.help_text(ctx.person)
        rest = _argument(text)
        refused = self._refused(row, ctx, rest)
        if refused is not None:
            return refused
        if row.subcommands:
            word, _, tail = rest.partition(" ")
            chosen = row.find(word or row.default)
            if chosen is None:
                return f"Usage: {row.name} {row.usage or '|'.join(s.name for s in row.subcommands)}"
            refused = self._refused(chosen, ctx, tail.strip())
            if refused is not None:
                return refused
            row, rest = chosen, tail.strip()
        assert row.handler is not None
        if row.admin_only:
            logger.info("admin %s by %s: %s", row.name, ctx.person.user_id, rest)
        return await row.handler(ctx, rest)

    def _refused(self, row: Command, ctx: CommandContext, rest: str) -> str | None:
        """The guards of a row, as data, checked here and nowhere else."""
        if not ctx.person.admitted and not (row.strangers and rest):
            return "This assistant is private."
        if row.admin_only and not ctx.person.is_admin:
            logger.info("admin command refused for %s", ctx.person.user_id)
            return NOT_ADMIN
        if row.dm_only and not ctx.private:
            return DM_ONLY
        return None

    # -- sessions --------------------------------------------------------------------------

    async def _new(self, ctx: CommandContext, _: str) -> str:
        if self.sessions is not None:
            self.sessions.reset(ctx)
        return RESET_REPLY

    async def _stop(self, ctx: CommandContext, _: str) -> str:
        if self.sessions is not None and self.sessions.stop_turn(ctx):
            return "Stopped. Your message is kept; say what you'd like instead."
        return "Nothing to stop: I'm not working on an answer."

    # -- everyone --------------------------------------------------------------------

    async def _help(self, ctx: CommandContext, _: str) -> str:
        return self.help_text(ctx.person)

    async def _whoami(self, ctx: CommandContext, _: str) -> str:
        person = ctx.person
        user = self.db.people.get_user(person.user_id)
        accounts = ", ".join(
            f"{i.platform} ({i.display_name or i.platform_user_id})"
            for i in self.db.people.identities_of(person.user_id)
        )
        name = (user.display_name if user else "") or person.display_name or "you"
        return (
            f"You are **{name}**, user `{person.user_id}`, role {person.role}.\n"
            f"Linked accounts: {accounts or 'none'}."
        )

    async def _sessions(self, ctx: CommandContext, query: str) -> str:
        scope = SearchScope(ctx.person.user_id, exclude_session_id=ctx.session_id)
        result = await SessionSearchTool(self.db, scope).run({"query": query, "limit": 5})
        items = result.get("results") or []
        if not items:
            return "No conversations found." if query else "No earlier conversations yet."
        lines = []
        for item in items:
            when = item.get("when") or item.get("last_active") or ""
            title = item.get("title") or "(untitled)"
            lines.append(f"• `{item['session_id']}` {item['platform']} {when} — {title}")
            excerpt = item.get("summary") or item.get("preview") or ""
            if excerpt:
                lines.append(f"  {excerpt[:200]}")
        heading = f"Conversations matching “{query}”:" if query else "Recent conversations:"
        return "\n".join([heading, *lines])

    async def _link(self, ctx: CommandContext, code: str) -> str:
        person = ctx.person
        if not code:
            minted = self.people.repo.create_link_code(person.user_id)
            minutes = int(LINK_CODE_TTL.total_seconds() // 60)
            return (
                f"Your link code: `{minted.code}` (single use, valid {minutes} minutes).\n"
                f"On another platform, send me `/link {minted.code}`; on the server, run "
                f"`hermes users link {minted.code}`. Both accounts then share one memory."
            )
        outcome = link_with_code(
            self.memory,
            self.db,
            code,
            requester=f"{person.platform}:{person.platform_user_id}",
            current_user=person.user_id,
        )
        if outcome.merged_away:
            logger.info("linked %s into %s", outcome.merged_away, outcome.user_id)
            self.people.changed()
        return outcome.message

    async def _unlink(self, ctx: CommandContext, platform: str) -> str:
        if not platform:
            return "Say which account to unlink, e.g. `/unlink slack`."
        ok, message = unlink_platform(self.db, ctx.person.user_id, platform.lower())
        if ok:
            self.people.changed()
        return message

    # -- memory ----------------------------------------------------------------------

    async def _memory_status(self, ctx: CommandContext, _: str) -> str:
        return self.memory_status(ctx.person.user_id)

    def memory_status(self, user_id: str) -> str:
        lines = []
        for store in self.memory.status(user_id):
            noun = store.target.noun
            if not store.enabled:
                lines.append(f"**{noun}**: disabled")
                continue
            line = (
                f"**{noun}**: {store.used:,}/{store.limit:,} chars ({store.percent}%), "
                f"{store.entries} entries"
            )
            if store.waiting:
                line += f", {store.waiting} merged entries waiting"
            if store.last_consolidated_at:
                line += f" · last consolidated {store.last_consolidated_at:%Y-%m-%d %H:%M} UTC"
            if store.damage:
                line += f" · needs fixing by hand: {store.damage}"
            elif store.needs_consolidation:
                line += f" · needs consolidation ({store.last_error or 'pending'})"
            lines.append(line)
        provider = self.memory.providers.name
        note = PROVIDER_NOTE if provider == NoProvider.name else f"{provider} (beside built-in)"
        lines.append(f"Provider: {note}")
        return "\n".join(lines)

    async def _memory_show(self, ctx: CommandContext, which: str) -> str:
        memory = self.memory.of(ctx.person.user_id)
        try:
            targets = [Target(which.lower())] if which else memory.enabled_targets()
        except ValueError:
            return "Say `/memory show memory` or `/memory show user`."
        blocks = []
        for target in targets:
            if not memory.enabled(target):
                blocks.append(f"**{target.noun}**: disabled")
                continue
            state = memory.store(target).read()
            lines = [f"**{target.noun}** ({state.usage_line()})"]
            lines += [f"{n}. {display_entry(e)}" for n, e in enumerate(state.entries, 1)]
            lines += [f"(waiting) {display_entry(e)}" for e in state.pending]
            if not state.entries and not state.pending:
                lines.append("(empty)")
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    async def _memory_forget(self, ctx: CommandContext, text: str) -> str:
        if not text:
            return "Say what to forget: `/memory forget TEXT` (part of the entry)."
        return await self.memory.forget(ctx.person.user_id, text, session_id=ctx.session_id)

    async def _memory_why(self, ctx: CommandContext, text: str) -> str:
        if not text:
            return "Say which entry: `/memory why TEXT` (part of the entry)."
        user_id = ctx.person.user_id
        events = self.db.memory_log.memory_events(user_id, text)[:5]
        if not events:
            return f"No recorded change mentions “{text}”."
        lines = []
        for event in events:
            entry = event.entry_after or event.entry_before or ""
            lines.append(
                f"• {event.created_at:%Y-%m-%d %H:%M} UTC — {event.action} in {event.target} "
                f"by {_ACTORS.get(event.actor, event.actor)}: “{entry[:160]}”"
            )
            chat = (
                self.db.conversations.get_session(event.session_id, user_id)
                if event.session_id
                else None
            )
            if chat is None:
                lines.append("  source: not from a conversation")
                continue
            lines.append(
                f"  source: {chat.platform} conversation `{chat.id}` of "
                f"{chat.started_at:%Y-%m-%d} — {chat.title or '(untitled)'}"
            )
            message = (
                self.db.conversations.message(event.message_id, user_id)
                if event.message_id
                else None
            )
            if message is not None and message.content:
                speaker = "you" if message.role == "user" else "I"
                lines.append(f"  {speaker} said: “{message.content[:200]}”")
        return "\n".join(lines)

    async def _memory_undo(self, ctx: CommandContext, _arg: str) -> str:
        _, message = await self.memory.undo(ctx.person.user_id)
        return message

    async def _memory_consolidate(self, ctx: CommandContext, _: str) -> str:
        runs = await self.memory.check([ctx.person.user_id], force=True)
        if not runs:
            return "Nothing to consolidate: each store has fewer than two entries."
        lines = []
        for run in runs:
            outcome = run.outcome
            if outcome.status == "applied":
                lines.append(
                    f"{run.target.noun}: {outcome.entries_before} → {outcome.entries_after} "
                    f"entries, {outcome.used_before:,} → {outcome.used_after:,} chars."
                )
            else:
                lines.append(f"{run.target.noun}: {outcome.status} ({outcome.detail}).")
        if any(run.outcome.status == "applied" for run in runs):
            lines.append("/memory undo reverts it.")
        return "\n".join(lines)

    # -- admin -----------------------------------------------------------------------

    async def _admin_status(self, _ctx: CommandContext, _: str) -> str:
        users, today = self.people.repo.counts()
        size = sum(
            p.stat().st_size
            for p in self.db.path.parent.glob(self.db.path.name + "*")
            if p.is_file()
        )
        runtime = self.runtime
        uptime = runtime.uptime_s() if runtime else None
        states = runtime.adapter_states() if runtime else {}
        lines = [
            f"Uptime: {_duration(uptime) if uptime is not None else 'no gateway running'}",
            "Platforms: "
            + (", ".join(f"{name} {state}" for name, state in states.items()) or "none"),
            f"Users: {users} · sessions today: {today} · state.db: {size / 1e6:.1f} MB",
        ]
        jobs = read_status(self.home, self.config, self.db)
        for job in jobs:
            when = f"{job.next_run:%Y-%m-%d %H:%M} UTC" if job.next_run else "not scheduled"
            last = {None: "", True: " (last ok)", False: " (last FAILED)"}[job.last_ok]
            lines.append(f"Job {job.id}: next {when}{last}")
        health = await runtime.llm_health() if runtime else "not checked"
        lines.append(f"LLM endpoint: {health}")
        return "\n".join(lines)

    async def _admin_users(self, _ctx: CommandContext, _: str) -> str:
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

    async def _admin_memory(self, _ctx: CommandContext, who: str) -> str:
        user_id = self.people.repo.resolve(who)
        if user_id is None:
            return f"No user {who!r}: give a user id (u_…) or PLATFORM:ID."
        return f"Memory of `{user_id}`:\n" + self.memory_status(user_id)

    async def _admin_approve(self, ctx: CommandContext, code: str) -> str:
        return self._decide(ctx, code, approve=True)

    async def _admin_deny(self, ctx: CommandContext, code: str) -> str:
        return self._decide(ctx, code, approve=False)

    def _decide(self, ctx: CommandContext, code: str, *, approve: bool) -> str:
        if not code:
            return "Give the pairing code: `/admin approve CODE`."
        row = self.people.repo.decide_pairing(code, approve, by=ctx.person.user_id)
        if row is None:
            return "No pending request has that code (it may have expired after 1 hour)."
        self.people.changed()
        verb = "Approved" if approve else "Denied"
        return f"{verb}: {row.platform} user {row.display_name or row.platform_user_id}."

    async def _admin_allow(self, ctx: CommandContext, subject: str) -> str:
        return self._rule(ctx, subject, "allow")

    async def _admin_block(self, ctx: CommandContext, subject: str) -> str:
        return self._rule(ctx, subject, "block")

    def _rule(self, ctx: CommandContext, subject: str, rule: str) -> str:
        parsed = parse_subject(subject)
        if parsed is None:
            return f"Say `/admin {rule} PLATFORM:ID` (or PLATFORM:chat:ID for a group chat)."
        platform, kind, ident = parsed
        self.people.repo.set_rule(
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


_ACTORS = {"agent": "the assistant", "user": "you", "admin": "an admin", "consolidator": "tidying"}


def _duration(seconds: float) -> str:
    minutes, _ = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h {minutes}m" if days else f"{hours}h {minutes}m"


def _help_line(name: str, row: Command) -> str:
    usage = f" {row.usage}" if row.usage and not row.subcommands else ""
    where = " (DM)" if row.dm_only and not row.admin_only else ""
    return f"{name}{usage} — {row.summary}{where}"


__all__ = [
    "Command",
    "CommandContext",
    "Commands",
    "RuntimeInfo",
    "SessionControl",
    "command_name",
    "parse_subject",
]
