"""The `/memory` commands: a person's memory as the chat shows it. Every change goes
through the memory service (the one write path); status text is built from its
`status`, the same figures `hermes memory status` shows."""

from __future__ import annotations

from gateway.commands.context import CommandContext
from hermes.memory.render import display_entry
from hermes.memory.service import MemoryService
from hermes.memory.store import Target
from hermes.providers.base import NoProvider
from hermes.providers.host import ProviderStatus
from hermes.state.db import SessionDB

PROVIDER_NOTE = "built-in only (no external memory provider)"
_ACTORS = {"agent": "the assistant", "user": "you", "admin": "an admin", "consolidator": "tidying"}
_ACTIONS = {"outside": "edited outside Hermes"}


def provider_line(status: ProviderStatus) -> str:
    """The memory provider as /memory status and `hermes memory status` show it."""
    if status.name == NoProvider.name:
        return PROVIDER_NOTE
    if not status.available:
        return f"{status.name}: not available ({status.reason}); built-in memory only"
    count = status.last_recall
    if count is None:
        recalled = "nothing recalled yet"
    else:
        recalled = f"recalled {count} memor{'y' if count == 1 else 'ies'} last turn"
    skipped = f", {status.skipped} prefetches skipped" if status.skipped else ""
    mode = status.recall_mode.value
    line = f"{status.name} (beside built-in), recall mode {mode}, {recalled}{skipped}"
    return line + delivery(status)


def delivery(status: ProviderStatus) -> str:
    """The provider's reachability and outbox, as a tail of the status line ('' when
    all is delivered and nothing failed)."""
    parts = []
    if not status.reachable:
        parts.append("not answering: its writes wait and are sent when it answers again")
    if status.waiting:
        parts.append(f"{status.waiting:,} write{'s' if status.waiting != 1 else ''} waiting")
    if status.last_error and (status.waiting or not status.reachable):
        parts.append(f"last error: {status.last_error}")
    if status.dropped and status.last_dropped is not None:
        when = status.last_dropped.strftime("%Y-%m-%d %H:%M UTC")
        parts.append(f"{status.dropped:,} write(s) given up ({status.drop_reason}), last at {when}")
    return "; " + "; ".join(parts) if parts else ""


class MemoryCommands:
    def __init__(self, memory: MemoryService, db: SessionDB) -> None:
        self.memory, self.db = memory, db

    async def status(self, ctx: CommandContext, _: str) -> str:
        return await self.db.run(self.status_text, ctx.person.user_id)

    def status_text(self, user_id: str) -> str:
        lines = []
        for store in self.memory.status(user_id):
            noun = store.target.noun
            if not store.enabled:
                lines.append(f"**{noun}**: disabled")
                continue
            line = (
                f"**{noun}**: {store.used:,}/{store.limit:,} chars ({store.percent}%), "
                f"{store.entries} {'entry' if store.entries == 1 else 'entries'}"
            )
            if store.waiting:
                line += f", {store.waiting} merged entries waiting"
            if store.last_consolidated_at:
                line += f" · last consolidated {store.last_consolidated_at:%Y-%m-%d %H:%M} UTC"
            if remark := store.remark():
                line += f" · {remark}"
            lines.append(line)
        if held := self.memory.held_writes(user_id):
            lines.append(f"{held} note(s) waiting for the safety check (saved once it passes)")
        lines.append(f"Provider: {provider_line(self.memory.providers.status(user_id))}")
        return "\n".join(lines)

    async def show(self, ctx: CommandContext, which: str) -> str:
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

    async def forget(self, ctx: CommandContext, text: str) -> str:
        if not text:
            return "Say what to forget: `/memory forget TEXT` (part of the entry)."
        return await self.memory.forget(ctx.person.user_id, text, session_id=ctx.session_id)

    async def why(self, ctx: CommandContext, text: str) -> str:
        if not text:
            return "Say which entry: `/memory why TEXT` (part of the entry)."
        changes = await self.db.run(self.memory.why, ctx.person.user_id, text, limit=5)
        if not changes:
            return f"No recorded change mentions “{text}”."
        lines = []
        for change in changes:
            entry = change.after or change.before or ""
            action = _ACTIONS.get(change.action, change.action)
            lines.append(
                f"• {change.at:%Y-%m-%d %H:%M} UTC — {action} in {change.target} "
                f"by {_ACTORS.get(change.actor, change.actor)}: “{entry[:160]}”"
            )
            source = change.source
            if source is None:
                lines.append("  source: not from a conversation")
                continue
            lines.append(
                f"  source: {source.platform} conversation `{source.session_id}` of "
                f"{source.started_at:%Y-%m-%d} — {source.title or '(untitled)'}"
            )
            if source.message:
                speaker = "you" if source.message_role == "user" else "I"
                lines.append(f"  {speaker} said: “{source.message[:200]}”")
        return "\n".join(lines)

    async def undo(self, ctx: CommandContext, _arg: str) -> str:
        _, message = await self.memory.undo(ctx.person.user_id)
        return message

    async def consolidate(self, ctx: CommandContext, _: str) -> str:
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
