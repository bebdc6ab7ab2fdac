"""What the assistant does for a person only once they say yes, and the messages it
sends to other chats for them (the `message` tool's gateway side).

A question (`ask`) goes to the chat the person is talking in, with two buttons that run
`/confirm CODE` or `/confirm CODE no` as the presser (a chat without buttons, the
terminal, shows the commands to type). Only the person asked can answer; a yes or a no
decides it once (state.db, hermes/state/confirmations.py), and the question's message
then shows how it ended, without its buttons. Three things ask:
- `message`: the first message to a chat (later ones to it go without asking);
- `mcp`: a person's first use of an MCP server's tools;
- `memory`: a memory write repeating what a page or a tool returned in that turn.

A message goes out through the same delivery path as replies (chunked as the platform
needs, retried as the platform allows, never sent twice: it is claimed in state.db
before it is sent), from the process that has the target's platform: this one at once,
or a gateway's sweep (with the reminders', every 30 s) when it was asked for in the
terminal. What was sent is stored in the target chat's conversation, saying where it
came from, so the assistant knows it said it when someone answers there.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gateway.admission.session_key import Scope, SessionKey
from gateway.edge.events import Button, ChatRef, MessageEvent, OutboundMessage
from gateway.edge.platforms import TERMINAL
from gateway.edge.ports import PlatformAdapter
from gateway.logs import process_name
from gateway.pipeline.delivery import Delivery
from hermes.buckets import Buckets, Taken
from hermes.config import MessageConfig
from hermes.places import ChatType, Surface
from hermes.state.access import new_code, normalize_code
from hermes.state.confirmations import STOPPED_MID_SEND, TTL
from hermes.state.models import Confirmation, as_utc, utcnow
from hermes.text import valid_text
from hermes.tools.capabilities import Holder
from hermes.tools.message import Target, named_target

if TYPE_CHECKING:
    from gateway.admission.people import People
    from gateway.pipeline.turns import LiveConversations
    from hermes.memory.service import MemoryService
    from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)

# kind -> (yes, no) button labels, and what each answer did, in words
LABELS = {
    "message": (("Send", "Don't send"), ("Sent.", "Not sent.")),
    "mcp": (("Allow", "Not now"), ("Allowed: ask me again and I'll use it.", "Not allowed.")),
    "memory": (("Save", "Don't save"), ("Saved to memory.", "Not saved.")),
}


# what the person's turn goes on from once they allowed an MCP server (their message)
ALLOWED_NOTE = "(I pressed Allow for the {server} tools: go on with what I asked.)"


def buttons(code: str, kind: str) -> tuple[Button, ...]:
    (yes, no), _ = LABELS[kind]
    return (
        Button(yes, f"/confirm {code}", "primary"),
        Button(no, f"/confirm {code} no", "danger"),
    )


def place(platform: str) -> str:
    """A platform as a message names it (the terminal is no platform to people)."""
    return "terminal" if platform == TERMINAL else platform


class Confirmations:
    """The agent's `Courier` and `Asker`, and the `/confirm` command's handler."""

    def __init__(
        self,
        db: SessionDB,
        people: People,
        delivery: Delivery,
        adapters: Mapping[str, PlatformAdapter],
        conversations: LiveConversations,
        *,
        memory: MemoryService,
        config: MessageConfig,
        platforms: tuple[str, ...] = (),
        scopes: Mapping[str, Scope] | None = None,
    ) -> None:
        self.db, self.people, self.delivery, self.adapters = db, people, delivery, adapters
        self.conversations, self.memory = conversations, memory
        self.config, self.configured = config, platforms
        self.scopes = scopes or {}  # each platform's group scope (per_user unless set)
        # the router's sink: where "I allowed it, go on" goes as the person's message
        self.go_on: Callable[[MessageEvent], Awaitable[None]] | None = None
        self.name = f"{process_name()}:{id(self):x}"
        self._chats = {name: named_target(name, spec) for name, spec in config.chats.items()}
        self._buckets = Buckets(config.per_person_per_hour / 60, config.per_person_burst)

    # -- Courier -------------------------------------------------------------------------

    @property
    def platforms(self) -> tuple[str, ...]:
        """Configured on this home (another process may run one) or running here; not
        the terminal (only ever the chat in front of it)."""
        return tuple(p for p in dict.fromkeys([*self.configured, *self.adapters]) if p != TERMINAL)

    @property
    def chats(self) -> dict[str, Target]:
        return self._chats

    async def send(
        self, holder: Holder, surface: Surface, target: Target, text: str
    ) -> dict[str, Any]:
        text = valid_text(text).strip()
        if len(text) > self.config.max_chars:
            return _failed(
                f"The message is too long ({len(text):,} characters; at most "
                f"{self.config.max_chars:,}). Shorten it."
            )
        if self._buckets.take(holder.user_id) is not Taken.YES:
            return _failed("Not sent: too many messages to other chats just now. Try later.")
        sent = await self._compose(holder, surface, target, text)
        payload = {
            "target": [target.name, target.platform, target.kind, target.id, target.own],
            "text": sent,
            "from": [surface.platform, surface.chat_id],
        }
        if not await self.consented(holder.user_id, target.subject):
            where = _where(target)
            question = f"**Send this to {where}?** (a first message there)\n\n> {text[:1500]}"
            code = await self.ask(
                holder.user_id,
                surface,
                "message",
                question,
                subject=target.subject,
                payload=payload,
                platform=target.platform,
            )
            if code is None:
                return _failed(
                    f"Not sent: a first message to {where} needs the person's yes, and "
                    "they cannot be asked here."
                )
            return {
                "success": True,
                "status": "waiting for the person's yes",
                "note": "They were asked with a button; it is sent when they press Send.",
            }
        code = new_code()
        row = _row(code, holder.user_id, "message", subject=target.subject, payload=payload)
        row.platform, row.status = target.platform, "ready"
        await self.db.run(self.db.confirmations.add, row)
        return await self._result(code)

    async def _compose(self, holder: Holder, surface: Surface, target: Target, text: str) -> str:
        """The message as the chat reads it, saying where it came from."""
        if target.own:
            return f"{text}\n\n_(sent from your {place(surface.platform)} chat)_"
        user = await self.db.run(self.db.people.get_user, holder.user_id)
        who = (user.display_name if user else "") or "someone"
        return f"{text}\n\n_(from {who}, sent by the assistant at their request)_"

    async def _result(self, code: str) -> dict[str, Any]:
        """A ready message sent now if this process has its platform; the tool's result."""
        row = await self.db.run(self.db.confirmations.get, code)
        if row is None:
            return _failed("Not sent: the message was lost.")
        if row.platform not in self.adapters:
            return {
                "success": True,
                "status": "queued",
                "note": f"The gateway running {place(row.platform)} sends it within a minute.",
            }
        state = await self.deliver(code)
        if state == "sent":
            return {"success": True, "status": "sent"}
        if state == "unknown":
            return {"success": True, "status": "sent, but the platform did not confirm it"}
        return _failed(f"Not sent: {place(row.platform)} refused it ({state}).")

    # -- Asker ---------------------------------------------------------------------------

    async def consented(self, user_id: str, subject: str) -> bool:
        return await self.db.run(self.db.confirmations.consented, user_id, subject)

    async def ask(
        self,
        user_id: str,
        surface: Surface,
        kind: str,
        question: str,
        *,
        subject: str = "",
        payload: dict[str, Any] | None = None,
        platform: str = "",
    ) -> str | None:
        adapter = self.adapters.get(surface.platform)
        if adapter is None:
            return None
        code = new_code()
        row = _row(code, user_id, kind, subject=subject, payload=payload or {}, question=question)
        row.platform = platform
        await self.db.run(self.db.confirmations.add, row)
        chat = ChatRef(surface.chat_id, surface.chat_type, surface.thread_id)
        shown = question
        if not adapter.capabilities.buttons:
            (yes, no), _ = LABELS[kind]
            shown += f"\n\n{yes}: `/confirm {code}` · {no}: `/confirm {code} no`"
        message = OutboundMessage(chat, shown, buttons=buttons(code, kind))
        result, _ = await self.delivery.attempt(lambda: adapter.send(message))
        if not result.ok:
            logger.warning("could not ask on %s: %s", surface.platform, result.error)
            await self.db.run(self.db.confirmations.finish, code, "expired", "not asked")
            return None
        return code

    # -- /confirm ------------------------------------------------------------------------

    async def answer(self, user_id: str, argument: str, event: MessageEvent | None) -> str:
        """`/confirm CODE [no]` from `user_id`, typed or pressed (`event`: what it came
        in). A pressed question is edited to show the outcome, and nothing else is said.
        An MCP server allowed: the person's turn goes on (a message of theirs saying so,
        through the router: the model calls the tool it was waiting for)."""
        words = argument.split()
        answer = words[1].lower() if len(words) == 2 else "yes"
        if not words or len(words) > 2 or answer not in ("yes", "no"):
            return "Usage: /confirm CODE (yes), or /confirm CODE no."
        code, yes = normalize_code(words[0]), answer == "yes"
        row = await self.db.run(self.db.confirmations.get, code)
        if row is None or row.user_id != user_id:  # someone else's: as if it did not exist
            return "There is no question of mine with that code for you."
        if not await self.db.run(self.db.confirmations.decide, code, user_id, yes):
            now = await self.db.run(self.db.confirmations.get, code)
            return _settled(now if now is not None else row)
        outcome = LABELS[row.kind][1][0 if yes else 1]
        if yes:
            outcome = await self._carry_out(row, outcome)
        go_on = self.go_on if yes and row.kind == "mcp" and event is not None else None
        if go_on is not None:
            outcome = "Allowed."
        said = outcome
        if event is not None and event.pressed and event.reply_to_id:
            adapter = self.adapters.get(event.platform)
            if adapter is not None:
                shown = OutboundMessage(event.chat, f"{row.question}\n\n{outcome}", buttons=())
                edit = await adapter.edit(event.chat, event.reply_to_id, shown)
                said = "" if edit.ok else outcome
        if go_on is not None and event is not None:
            await go_on(_allowed(event, row.subject.removeprefix("mcp:")))
        return said

    async def _carry_out(self, row: Confirmation, outcome: str) -> str:
        if row.kind == "message":
            if row.platform not in self.adapters:
                return f"Queued: the gateway running {place(row.platform)} sends it shortly."
            state = await self.deliver(row.code)
            return outcome if state == "sent" else f"Could not send it ({state})."
        if row.kind == "memory":
            payload = json.loads(row.payload)
            done = await self.memory.apply(
                row.user_id,
                payload["args"],
                actor="user",  # the person's own yes
                session_id=payload.get("session_id"),
                message_id=payload.get("message_id"),
            )
            if not done.result.get("success"):
                return f"Not saved: {done.result.get('error', 'the memory refused it')}"
        return outcome

    # -- delivery ------------------------------------------------------------------------

    async def deliver(self, code: str) -> str:
        """Send a ready message once (claimed first); how it went: 'sent', 'unknown',
        'failed: …', or 'skipped' (not ready: sent already, taken by another process)."""
        row = await self.db.run(self.db.confirmations.claim, code, self.name)
        if row is None:
            return "skipped"
        payload = json.loads(row.payload)
        name, platform, kind, ident, own = payload["target"]
        target, text = Target(name, platform, kind, ident, own), payload["text"]
        adapter = self.adapters[platform]
        try:
            chat = await self._chat(adapter, target)
        except Exception as exc:
            chat, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "no direct chat with that account"
        if chat is None:
            await self.db.run(self.db.confirmations.finish, code, "failed", why)
            return f"failed: {why}"
        stored = await self.db.run(self._store, row, target, chat, text)
        result = await self.delivery.send(adapter, chat, text, None, stored_id=stored)
        state = "sent" if result.ok else "unknown" if result.outcome_unknown else "failed"
        if stored is not None:
            await self.db.run(self.db.conversations.set_delivery, stored, state)
        detail = "" if result.ok else result.error or ""
        await self.db.run(self.db.confirmations.finish, code, state, detail)
        logger.info("message %s to %s %s: %s", code, platform, kind, state)
        return state if result.ok or result.outcome_unknown else f"failed: {detail}"

    async def _chat(self, adapter: PlatformAdapter, target: Target) -> ChatRef | None:
        if target.kind == "user":
            return await adapter.direct_chat(target.id)
        return ChatRef(target.id, ChatType.GROUP)

    def _store(self, row: Confirmation, target: Target, chat: ChatRef, text: str) -> int | None:
        """What is sent, as the assistant's message in the target chat's conversation
        (blocking: the database executor); None when that chat has no session it belongs
        in: a person the gateway does not know yet; a group whose sessions are each
        person's (`group_scope: per_user`, the default) where the asker has no account
        (theirs is the session it goes in: the one in which they would talk about it)."""
        if target.kind == "user":
            owner = row.user_id if target.own else None
            owner = owner or self.db.people.user_by_identity(target.platform, target.id)
            if owner is None:
                return None
            key = SessionKey(target.platform, ChatType.DM, chat.id, None, target.id)
        elif self.scopes.get(target.platform, Scope.PER_USER) is Scope.PER_CHAT:
            owner = self.people.chat_owner(target.platform, target.id)
            kind = self._chat_type(owner, target.platform, chat)
            key = SessionKey(target.platform, kind, chat.id, None, None)
        else:
            there = self.db.people.identities_of(row.user_id)
            account = next((i for i in there if i.platform == target.platform), None)
            if account is None:
                return None
            owner, kind = row.user_id, self._chat_type(row.user_id, target.platform, chat)
            key = SessionKey(target.platform, kind, chat.id, None, account.platform_user_id)
        return self.conversations.record(key, owner, text)

    def _chat_type(self, owner: str, platform: str, chat: ChatRef) -> ChatType:
        """A named chat's type as its sessions have it (a group or a channel: only its
        messages say which), else a group."""
        [*seen] = self.db.conversations.list_sessions(owner, platform, 1, chat.id)
        if seen and seen[0].chat_type in (ChatType.GROUP, ChatType.CHANNEL):
            return ChatType(seen[0].chat_type)
        return chat.type

    async def sweep(self, now: datetime | None = None) -> int:
        """Expire what waited too long; send the ready messages of this process's
        platforms (asked for in another process). How many were sent."""
        _, stuck = await self.db.run(self.db.confirmations.expire, now)
        if stuck:
            logger.warning(
                "%d message(s) to other chats may or may not have been sent: %s",
                stuck,
                STOPPED_MID_SEND,
            )
        codes = await self.db.run(self.db.confirmations.ready, tuple(self.adapters), now)
        sent = 0
        for code in codes:
            sent += await self.deliver(code) == "sent"
        return sent


def _row(
    code: str,
    user_id: str,
    kind: str,
    *,
    subject: str,
    payload: dict[str, Any],
    question: str = "",
) -> Confirmation:
    now = utcnow()
    return Confirmation(
        code=code,
        user_id=user_id,
        kind=kind,
        subject=subject,
        payload=json.dumps(payload, ensure_ascii=False),
        question=question,
        created_at=now,
        expires_at=now + TTL,
    )


def _allowed(event: MessageEvent, server: str) -> MessageEvent:
    """The person's message that says they allowed `server` (in the chat and as the
    person of the `/confirm` that allowed it): what the waiting turn goes on from. Its
    id ends as the platform's id of the message the reply answers (adapters reply to
    an id's last part): the question pressed, or the `/confirm` typed."""
    answered = event.reply_to_id if event.pressed and event.reply_to_id else event.message_id
    return dataclasses.replace(
        event,
        event_id=f"allowed:{event.event_id}",
        message_id=f"allowed:{answered}",
        text=ALLOWED_NOTE.format(server=server),
        reply_to_id=None,
        mentioned=True,  # to the bot, in a group too
        replied_to_bot=False,
        attachments=(),
        received_at=datetime.now(UTC),
        sent_at=time.time(),
        pressed=False,
        raw=None,
    )


def _where(target: Target) -> str:
    if target.own:
        return f"your {place(target.platform)} account"
    return f"{target.name} ({place(target.platform)})"


def _settled(row: Confirmation) -> str:
    """An answer that came too late or twice: how the question had ended."""
    if row.status == "declined":
        return "You already said no to that."
    if row.status == "expired" or (row.status == "asked" and as_utc(row.expires_at) <= utcnow()):
        return "That question expired (they last an hour). Ask me again."
    return "You already said yes to that."


def _failed(error: str) -> dict[str, Any]:
    return {"success": False, "error": error}


__all__ = ["ALLOWED_NOTE", "LABELS", "Confirmations", "buttons"]
