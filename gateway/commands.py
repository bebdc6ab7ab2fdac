"""Chat commands, the same on every platform and the CLI chat. None reaches the LLM
(except `/memory consolidate`, which is the consolidation model's job).

Replies are Markdown; the adapter formats them for its platform and the router chunks
them to its limit. Personal content (memory entries, provenance, past sessions) is shown
only in direct messages and the CLI, never in a group chat. The router handles `/new`
and `/stop` itself (they act on its lanes), and the CLI chat `/new` and `/exit`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gateway.access import Caller
from gateway.config import HermesConfig
from gateway.scheduler import read_status
from hermes.agent.agent import Agent
from hermes.agent.conversation import Surface
from hermes.linking import link_with_code, unlink_platform
from hermes.memory import sweep
from hermes.memory.journal import run_recorded
from hermes.memory.render import display_entry
from hermes.memory.store import Target
from hermes.memory.tool import MemoryTool
from hermes.memory.undo import undo_last
from hermes.state.db import SessionDB
from hermes.state.models import AccessRule
from hermes.state.people import LINK_CODE_TTL, PeopleDB
from hermes.state.search import SearchScope
from hermes.tools.session_search import SessionSearchTool

logger = logging.getLogger(__name__)

USER_HELP = """\
**Commands**
/help — this list
/whoami — your user id, role and linked accounts
/new (or /reset) — start a fresh conversation
/stop — cancel the answer I'm working on
/memory — memory usage; /memory show [memory|user] — the entries
/memory forget TEXT — remove the entry containing TEXT
/memory why TEXT — where an entry came from
/memory undo — revert the last memory change (a consolidation too)
/memory consolidate — tidy a full memory now
/sessions [query] — recent conversations, or search them
/link — a code to link another account; /link CODE — link this account
/unlink PLATFORM — detach a linked account"""
ADMIN_HELP = """\
**Admin**
/admin status — uptime, platforms, users, jobs, model health
/admin users — everyone who has talked to me
/admin memory USER — another user's memory usage (USER: u_… or platform:id)
/admin approve CODE, /admin deny CODE — pairing requests
/admin allow PLATFORM:ID, /admin block PLATFORM:ID — a user (PLATFORM:chat:ID for a group)"""
DM_ONLY = "I only show that in a direct message, not in a group chat."
NOT_ADMIN = "That command needs an admin."
PROVIDER_NOTE = "built-in only (no external memory provider)"


class RuntimeInfo(Protocol):
    """What the running process knows about itself, for `/admin status`."""

    def uptime_s(self) -> float | None: ...

    def adapter_states(self) -> dict[str, str]: ...

    async def llm_health(self) -> str: ...


@dataclass(frozen=True, slots=True)
class CommandContext:
    caller: Caller
    surface: Surface
    session_id: str | None = None  # the conversation the command was sent in

    @property
    def private(self) -> bool:
        return self.surface.chat_type == "dm"


Handler = Callable[[CommandContext, str], Awaitable[str]]


class Commands:
    def __init__(
        self,
        home: Path,
        config: HermesConfig,
        db: SessionDB,
        agent: Agent,
        *,
        runtime: RuntimeInfo | None = None,
    ) -> None:
        self.home, self.config, self.db, self.agent = home, config, db, agent
        self.people = PeopleDB(db)
        self.runtime = runtime
        # identities, roles or access rules changed: the router that runs us sets this
        self.on_people_change: Callable[[], None] = lambda: None
        self._user: dict[str, Handler] = {
            "/help": self._help,
            "/start": self._help,
            "/whoami": self._whoami,
            "/memory": self._memory,
            "/sessions": self._sessions,
            "/link": self._link,
            "/unlink": self._unlink,
            "/admin": self._admin,
        }
        self._memory_subcommands: dict[str, Handler] = {
            "status": self._memory_status,
            "show": self._memory_show,
            "forget": self._memory_forget,
            "why": self._memory_why,
            "undo": self._memory_undo,
            "consolidate": self._memory_consolidate,
        }
        self._admin_subcommands: dict[str, Handler] = {
            "status": self._admin_status,
            "users": self._admin_users,
            "memory": self._admin_memory,
            "approve": self._admin_approve,
            "deny": self._admin_deny,
            "allow": self._admin_allow,
            "block": self._admin_block,
        }

    @staticmethod
    def name_of(text: str) -> str:
        """'/Memory@hermes_bot show' -> '/memory'."""
        return text.split(maxsplit=1)[0].split("@", maxsplit=1)[0].lower() if text else ""

    async def run(self, ctx: CommandContext, text: str) -> str:
        name = self.name_of(text)
        rest = text.split(maxsplit=1)[1].strip() if len(text.split(maxsplit=1)) > 1 else ""
        handler = self._user.get(name)
        if handler is None:
            return f"I don't know {name}. " + await self._help(ctx, "")
        return await handler(ctx, rest)

    # -- everyone --------------------------------------------------------------------

    async def _help(self, ctx: CommandContext, _: str) -> str:
        return USER_HELP + ("\n\n" + ADMIN_HELP if ctx.caller.is_admin else "")

    async def _whoami(self, ctx: CommandContext, _: str) -> str:
        caller = ctx.caller
        user = self.db.get_user(caller.user_id)
        accounts = ", ".join(
            f"{i.platform} ({i.display_name or i.platform_user_id})"
            for i in self.db.identities_of(caller.user_id)
        )
        name = (user.display_name if user else "") or caller.display_name or "you"
        return (
            f"You are **{name}**, user `{caller.user_id}`, role {caller.role}.\n"
            f"Linked accounts: {accounts or 'none'}."
        )

    async def _sessions(self, ctx: CommandContext, query: str) -> str:
        if not ctx.private:
            return DM_ONLY
        scope = SearchScope(ctx.caller.user_id, exclude_session_id=ctx.session_id)
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
        if not ctx.private:  # a code seen by a group could join a stranger to this person
            return DM_ONLY
        caller = ctx.caller
        if not code:
            minted = self.people.create_link_code(caller.user_id)
            minutes = int(LINK_CODE_TTL.total_seconds() // 60)
            return (
                f"Your link code: `{minted.code}` (single use, valid {minutes} minutes).\n"
                f"On another platform, send me `/link {minted.code}`; on the server, run "
                f"`hermes users link {minted.code}`. Both accounts then share one memory."
            )
        outcome = link_with_code(
            self.home,
            self.config.memory,
            self.db,
            code,
            requester=f"{caller.platform}:{caller.platform_user_id}",
            current_user=caller.user_id,
        )
        if outcome.merged_away:
            logger.info("linked %s into %s", outcome.merged_away, outcome.user_id)
            self.on_people_change()
        return outcome.message

    async def _unlink(self, ctx: CommandContext, platform: str) -> str:
        if not platform:
            return "Say which account to unlink, e.g. `/unlink slack`."
        ok, message = unlink_platform(self.db, ctx.caller.user_id, platform.lower())
        if ok:
            self.on_people_change()
        return message

    # -- memory ----------------------------------------------------------------------

    async def _memory(self, ctx: CommandContext, rest: str) -> str:
        sub, _, arg = rest.partition(" ")
        handler = self._memory_subcommands.get(sub.lower() or "status")
        if handler is None:
            return "Usage: /memory [status | show [memory|user] | forget TEXT | why TEXT | undo]"
        return await handler(ctx, arg.strip())

    async def _memory_status(self, ctx: CommandContext, _: str) -> str:
        return self.memory_status(ctx.caller.user_id)

    def memory_status(self, user_id: str) -> str:
        memory = self.agent.memory_of(user_id)
        lines = []
        for target in Target:
            if not memory.enabled(target):
                lines.append(f"**{target.noun}**: disabled")
                continue
            state = memory.store(target).read()
            book = self.db.consolidation_state(user_id, target.value)
            line = (
                f"**{target.noun}**: {state.used:,}/{state.limit:,} chars ({state.percent}%), "
                f"{len(state.entries)} entries"
            )
            if state.pending:
                line += f", {len(state.pending)} merged entries waiting"
            if book.last_consolidated_at:
                line += f" · last consolidated {book.last_consolidated_at:%Y-%m-%d %H:%M} UTC"
            if state.damage:
                line += f" · needs fixing by hand: {state.damage}"
            elif book.needs_consolidation:
                line += f" · needs consolidation ({book.last_error or 'pending'})"
            lines.append(line)
        lines.append(f"Provider: {PROVIDER_NOTE}")
        return "\n".join(lines)

    async def _memory_show(self, ctx: CommandContext, which: str) -> str:
        if not ctx.private:
            return DM_ONLY
        memory = self.agent.memory_of(ctx.caller.user_id)
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
        if not ctx.private:
            return DM_ONLY
        if not text:
            return "Say what to forget: `/memory forget TEXT` (part of the entry)."
        memory = self.agent.memory_of(ctx.caller.user_id)
        found = [
            (target, entry)
            for target in memory.enabled_targets()
            for entry in memory.store(target).read().entries
            if text in entry
        ]
        if not found:
            return f"Nothing in your memory contains “{text}”."
        if len(found) > 1:
            listed = "\n".join(f"• {display_entry(entry)}" for _, entry in found)
            return f"Several entries contain “{text}”; be more specific:\n{listed}"
        target = found[0][0]
        args = {"action": "remove", "target": target.value, "old_text": text}
        outcome = run_recorded(
            MemoryTool(memory), self.db, args, actor="user", session_id=ctx.session_id
        )
        if not outcome.ok:
            return str(outcome.result.get("error"))
        return f"Forgotten: “{display_entry(found[0][1])}”. (/memory undo brings it back.)"

    async def _memory_why(self, ctx: CommandContext, text: str) -> str:
        if not ctx.private:
            return DM_ONLY
        if not text:
            return "Say which entry: `/memory why TEXT` (part of the entry)."
        user_id = ctx.caller.user_id
        events = self.db.memory_events(user_id, text)[:5]
        if not events:
            return f"No recorded change mentions “{text}”."
        lines = []
        for event in events:
            entry = event.entry_after or event.entry_before or ""
            lines.append(
                f"• {event.created_at:%Y-%m-%d %H:%M} UTC — {event.action} in {event.target} "
                f"by {_ACTORS.get(event.actor, event.actor)}: “{entry[:160]}”"
            )
            chat = self.db.get_session(event.session_id, user_id) if event.session_id else None
            if chat is None:
                lines.append("  source: not from a conversation")
                continue
            lines.append(
                f"  source: {chat.platform} conversation `{chat.id}` of "
                f"{chat.started_at:%Y-%m-%d} — {chat.title or '(untitled)'}"
            )
            message = self.db.message(event.message_id, user_id) if event.message_id else None
            if message is not None and message.content:
                speaker = "you" if message.role == "user" else "I"
                lines.append(f"  {speaker} said: “{message.content[:200]}”")
        return "\n".join(lines)

    async def _memory_undo(self, ctx: CommandContext, _arg: str) -> str:
        if not ctx.private:
            return DM_ONLY
        _, message = undo_last(self.agent.memory_of(ctx.caller.user_id), self.db)
        return message

    async def _memory_consolidate(self, ctx: CommandContext, _: str) -> str:
        model = self.agent.aux_model or self.agent.model
        runs = await sweep.check(
            self.home, self.db, model, self.config.memory, [ctx.caller.user_id], force=True
        )
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

    async def _admin(self, ctx: CommandContext, rest: str) -> str:
        if not ctx.caller.is_admin:
            logger.info("admin command refused for %s", ctx.caller.user_id)
            return NOT_ADMIN
        if not ctx.private:  # user lists, memory usage and codes are not for a group
            return DM_ONLY
        sub, _, arg = rest.partition(" ")
        handler = self._admin_subcommands.get(sub.lower())
        if handler is None:
            return ADMIN_HELP
        logger.info("admin %s by %s: %s", sub, ctx.caller.user_id, arg)
        return await handler(ctx, arg.strip())

    async def _admin_status(self, _ctx: CommandContext, _: str) -> str:
        users, today = self.people.counts()
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
        for summary in self.people.users():
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
        user_id = self.people.resolve(who)
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
        row = self.people.decide_pairing(code, approve, by=ctx.caller.user_id)
        if row is None:
            return "No pending request has that code (it may have expired after 1 hour)."
        self.on_people_change()
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
        self.people.set_rule(
            AccessRule(
                platform=platform,
                kind=kind,
                subject=ident,
                rule=rule,
                created_by=ctx.caller.user_id,
            )
        )
        self.on_people_change()
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


__all__ = ["CommandContext", "Commands", "RuntimeInfo", "parse_subject"]
