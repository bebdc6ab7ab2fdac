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
from dataclasses import dataclass
from pathlib import Path

from gateway.admission.people import People, Person
from gateway.commands.admin import AdminCommands
from gateway.commands.context import (
    Answers,
    CommandContext,
    Handler,
    RuntimeInfo,
    SessionControl,
)
from gateway.commands.memory import MemoryCommands
from gateway.commands.reminders import ReminderCommands
from gateway.config import HermesConfig
from gateway.edge.ports import MenuEntry
from hermes.agent.agent import Agent
from hermes.state.access import LINK_CODE_TTL
from hermes.state.db import SessionDB
from hermes.state.search import SearchScope
from hermes.tools import capabilities
from hermes.tools.session_search import SessionSearchTool

logger = logging.getLogger(__name__)

DM_ONLY = "I only show that in a direct message, not in a group chat."
NOT_ADMIN = "That command needs an admin."
RESET_REPLY = "Started a fresh conversation. I still remember what's in my memory."


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
        self.people, self.memory = people, agent.memory
        self.memory_commands = MemoryCommands(self.memory, db)
        self.admin = AdminCommands(
            home, config, db, people, self.memory_commands, embedder=agent.embedder
        )
        self.admin.runtime = runtime
        self.admin.mcp_states = agent.mcp.states if agent.mcp is not None else dict
        self.reminder_commands = ReminderCommands(db)
        self.sessions: SessionControl | None = None  # the router running us sets this
        self.confirmations: Answers | None = None  # questions put with buttons
        self.table = self._table()
        self._index = {n: c for c in self.table for n in (c.name, *c.aliases)}

    def _table(self) -> tuple[Command, ...]:
        """Every command, in the order /help and the menus show them."""
        sub, mem, admin = Command, self.memory_commands, self.admin
        rem = self.reminder_commands
        return (
            Command("/help", "What I can do", self._help, aliases=("/start",)),
            Command("/whoami", "Your user id, role and linked accounts", self._whoami),
            Command("/new", "Start a fresh conversation", self._new, aliases=("/reset",)),
            Command("/stop", "Cancel the answer I'm working on", self._stop, immediate=True),
            Command("/tools", "What I can do for you (tools)", self._tools),
            Command(
                "/confirm",
                "Answer a question I asked you with buttons",
                self._confirm,
                usage="CODE [no]",
                menu=False,
            ),
            Command(
                "/memory",
                "Memory: status, show, forget, why, undo, consolidate",
                default="status",
                usage="[status|show|forget|why|undo|consolidate]",
                subcommands=(
                    sub("status", "memory usage per store", mem.status),
                    sub(
                        "show",
                        "the entries",
                        mem.show,
                        usage="[memory|user]",
                        dm_only=True,
                    ),
                    sub(
                        "forget",
                        "remove the entry containing TEXT",
                        mem.forget,
                        usage="TEXT",
                        dm_only=True,
                    ),
                    sub(
                        "why",
                        "where an entry came from",
                        mem.why,
                        usage="TEXT",
                        dm_only=True,
                    ),
                    sub(
                        "undo",
                        "revert the last memory change (a consolidation too)",
                        mem.undo,
                        dm_only=True,
                    ),
                    sub("consolidate", "tidy a full memory now", mem.consolidate),
                ),
            ),
            Command(
                "/timezone",
                "Your time zone, for reminders",
                self.reminder_commands.timezone,
                usage="[Area/City]",
            ),
            Command(
                "/reminders",
                "Your reminders; cancel one",
                default="list",
                usage="[list|cancel ID]",
                subcommands=(
                    sub("list", "your reminders and when they come next", rem.list),
                    sub("cancel", "cancel a reminder", rem.cancel, usage="ID"),
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
                "/dashboard",
                "A one-time login link to the web dashboard (admins only)",
                admin.dashboard,
                admin_only=True,
                dm_only=True,  # the link logs in as its asker
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
                        admin.status,
                    ),
                    sub("users", "everyone who has talked to me", admin.users),
                    sub(
                        "memory",
                        "another user's memory usage (USER: u_… or platform:id)",
                        admin.memory,
                        usage="USER",
                    ),
                    sub("approve", "approve a pairing request", admin.approve, usage="CODE"),
                    sub("deny", "deny a pairing request", admin.deny, usage="CODE"),
                    sub(
                        "allow",
                        "allow a user (PLATFORM:chat:ID for a group)",
                        admin.allow,
                        usage="PLATFORM:ID",
                    ),
                    sub(
                        "block",
                        "block a user (PLATFORM:chat:ID for a group)",
                        admin.block,
                        usage="PLATFORM:ID",
                    ),
                ),
            ),
        )

    @property
    def runtime(self) -> RuntimeInfo | None:
        """What the running process knows of itself (for /admin status)."""
        return self.admin.runtime

    @runtime.setter
    def runtime(self, runtime: RuntimeInfo | None) -> None:
        self.admin.runtime = runtime

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
        admin: list[str] = ["**Admin**"]  # one heading over every admin command
        for row in self.table:
            target = admin if row.admin_only else lines
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
            logger.info("admin %s by %s", row.name, ctx.person.user_id)  # not its text
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
            await self.sessions.reset(ctx)
        return RESET_REPLY

    async def _stop(self, ctx: CommandContext, _: str) -> str:
        if self.sessions is not None and await self.sessions.stop_turn(ctx):
            return "Stopped. Your message is kept; say what you'd like instead."
        return "Nothing to stop: I'm not working on an answer."

    # -- everyone --------------------------------------------------------------------

    async def _help(self, ctx: CommandContext, _: str) -> str:
        return self.help_text(ctx.person)

    async def _whoami(self, ctx: CommandContext, _: str) -> str:
        person = ctx.person
        user = await self.db.run(self.db.people.get_user, person.user_id)
        accounts = ", ".join(
            f"{i.platform} ({i.display_name or i.platform_user_id})"
            for i in await self.db.run(self.db.people.identities_of, person.user_id)
        )
        name = (user.display_name if user else "") or person.display_name or "you"
        return (
            f"You are **{name}**, user `{person.user_id}`, role {person.role}.\n"
            f"Linked accounts: {accounts or 'none'}."
        )

    async def _confirm(self, ctx: CommandContext, argument: str) -> str:
        if self.confirmations is None:
            return "I have asked you nothing to confirm."
        event = ctx.admitted.event if ctx.admitted is not None else None
        return await self.confirmations.answer(ctx.person.user_id, argument, event)

    async def _tools(self, ctx: CommandContext, _: str) -> str:
        holder = await self.db.run(self.agent.holder, ctx.person.user_id)
        lines, off = ["**Tools I can use for you**"], []
        for group in self.agent.tool_groups:
            refused = capabilities.may_use(holder, group, self.agent.tools_table)
            what = capabilities.summary(group)
            if refused is None:
                lines.append(f"• {what} (`{group}`)")
            else:
                off.append(f"• {what} (`{group}`): {refused}")
        if len(lines) == 1:
            lines.append("• none")
        if off:
            lines += ["", "**Not for you here**", *off]
        return "\n".join(lines)

    async def _sessions(self, ctx: CommandContext, query: str) -> str:
        scope = SearchScope(ctx.person.user_id, exclude_session_id=ctx.session_id)
        tool = SessionSearchTool(self.db, scope, embedder=self.agent.embedder)
        result = await tool.run({"query": query, "limit": 5})
        items = result.get("results") or []
        if not items:
            return "No conversations found." if query else "No earlier conversations yet."
        lines = []
        for item in items:
            when = item.get("when") or item.get("last_active") or ""
            title = item.get("title") or "(untitled)"
            lines.append(f"• `{item['session_id']}` {item['platform']} {when} — {title}")
            excerpt = (item.get("summary") or item.get("preview") or "")[:200]
            if excerpt and not title.startswith(excerpt.rstrip("…").strip()):
                lines.append(f"  {excerpt}")  # not when it only says the title again
        heading = f"Conversations matching “{query}”:" if query else "Recent conversations:"
        return "\n".join([heading, *lines])

    async def _link(self, ctx: CommandContext, code: str) -> str:
        person = ctx.person
        if not code:
            minted = await self.db.run(self.people.link_code, person.user_id, by=person.user_id)
            minutes = int(LINK_CODE_TTL.total_seconds() // 60)
            return (
                f"Your link code: `{minted}` (single use, valid {minutes} minutes).\n"
                f"On another platform, send me `/link {minted}`; on the server, run "
                f"`hermes users link {minted}`. Both accounts then share one memory."
            )
        requester = f"{person.platform}:{person.platform_user_id}"
        outcome = await self.people.link_from_chat(
            code, requester=requester, current_user=person.user_id
        )
        return outcome.message

    async def _unlink(self, ctx: CommandContext, platform: str) -> str:
        if not platform:
            return "Say which account to unlink, e.g. `/unlink slack`."
        _, message = await self.db.run(self.people.unlink, ctx.person.user_id, platform.lower())
        return message

    # -- memory ----------------------------------------------------------------------

    # -- admin -----------------------------------------------------------------------


def _help_line(name: str, row: Command) -> str:
    usage = f" {row.usage}" if row.usage and not row.subcommands else ""
    where = " (DM)" if row.dm_only and not row.admin_only else ""
    return f"{name}{usage} — {row.summary}{where}"


__all__ = ["Command", "Commands", "command_name"]
