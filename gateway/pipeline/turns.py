"""One batch from a lane, worked: its files made ready (or a note when nothing in it can
be used), a command run in its place in line, or an agent turn on the session's live
conversation (typing shown, the reply streamed or delivered whole).

`LiveConversations` keeps each session key's conversation in memory while its session
is open (re-checked in state.db now and then), and the ones pinned by the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping

from gateway.admission.intake import Admitted
from gateway.admission.people import People
from gateway.admission.session_key import SessionKey
from gateway.edge.events import ChatRef, MessageEvent
from gateway.edge.ports import PlatformAdapter
from gateway.pipeline.delivery import Delivery
from gateway.pipeline.lanes import Batch
from gateway.pipeline.media import MediaIntake, Prepared
from gateway.pipeline.streaming import StreamedReply
from hermes.agent.agent import Agent, Speaker, Surface
from hermes.agent.conversation import Conversation
from hermes.places import ChatType
from hermes.state.conversations import NewMessage, TurnOutcome
from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)

TYPING_AFTER_S = 0.3
SESSION_RECHECK_S = 10.0  # an open session is re-read from state.db this often
ASK_AGAIN = (
    "I was interrupted while answering this (a restart on my side) and lost my reply. "
    "Could you send it again?"
)
# a message answered this long after it was written (caught up after a restart, or
# waiting while the gateway was down) gets a line saying so before its answer
LATE_AFTER_S = 600.0
LATE_NOTE = "You wrote this {ago} ago, while I was offline; answering now."
NO_TEXT_REPLY = (
    "I can read text messages (and captions on photos and files), but I can't open "
    "{what} yet. Could you describe it in words?"
)


def surface_of(event: MessageEvent) -> Surface:
    return Surface(event.platform, event.chat.type, event.chat.id, event.chat.thread_id)


class LiveConversations:
    """Each key's live conversation. `of` runs on the database executor's threads (it
    reads and opens sessions), the rest on the loop: the maps are kept under a lock."""

    def __init__(self, agent: Agent, db: SessionDB, people: People, limit: int) -> None:
        self.agent, self.db, self.people, self.limit = agent, db, people, limit
        # live conversations, with when their session was last seen open in state.db
        self._cached: OrderedDict[SessionKey, tuple[Conversation, float]] = OrderedDict()
        self._pinned: dict[SessionKey, Conversation] = {}  # see pin()
        self._lock = threading.Lock()

    def pin(self, key: SessionKey, conv: Conversation) -> None:
        """Continue `conv` for this key until /new, whatever session the key had (the
        CLI opens a fresh session per run, or resumes one from anywhere)."""
        with self._lock:
            self._pinned[key] = conv

    def live(self, key: SessionKey) -> Conversation | None:
        """The key's conversation if one is in memory (nothing is opened)."""
        with self._lock:
            return self._pinned.get(key) or (self._cached.get(key) or (None,))[0]

    def forget(self, key: SessionKey) -> None:
        with self._lock:
            self._cached.pop(key, None)
            self._pinned.pop(key, None)

    def forget_all(self) -> None:
        """People changed (a merge moves sessions to another id): read them again."""
        with self._lock:
            self._cached.clear()

    async def aof(self, item: Admitted, surface: Surface) -> Conversation:
        """`of`, awaited from the event loop (on the database executor)."""
        return await self.db.run(self.of, item, surface)

    def of(self, item: Admitted, surface: Surface) -> Conversation:
        """The live conversation of a key, kept in memory while its session is open.

        Whether the session was ended elsewhere (the idle job) is re-checked in state.db
        at most every SESSION_RECHECK_S seconds; /new drops the entry itself.
        """
        return self._conversation(item.key, self._owner(item), surface)

    def record(self, key: SessionKey, owner: str, content: str) -> int | None:
        """`content` as the assistant's message in the key's conversation (a message
        the assistant sent there unasked: the `message` tool), on its way ("sending");
        its id. Blocking: the database executor."""
        surface = Surface(key.platform, key.chat_type, key.chat_id, key.thread_id)
        conv = self._conversation(key, owner, surface)
        stored = NewMessage("assistant", content, delivery="sending")
        [message_id] = self.db.conversations.add_messages(conv.id, [stored])
        conv.append([{"role": "assistant", "content": content}])
        return message_id

    def _conversation(self, key: SessionKey, owner: str, surface: Surface) -> Conversation:
        now = time.monotonic()
        with self._lock:
            pinned = self._pinned.get(key)
            if pinned is not None and pinned.user_id == owner:
                return pinned
            entry = self._cached.get(key)
            if entry is not None and entry[0].user_id == owner:
                conv, checked = entry
                if now - checked < SESSION_RECHECK_S:
                    self._cached.move_to_end(key)
                    return conv
        if entry is not None and entry[0].user_id == owner:
            conv = entry[0]
            current = self.db.conversations.get_session(conv.id, owner)
            if current is not None and current.ended_at is None:
                self._keep(key, conv, now)
                return conv
        conv = self.agent.sessions.for_key(owner, surface, str(key), shared=key.shared)
        self._keep(key, conv, now)
        return conv

    def _keep(self, key: SessionKey, conv: Conversation, now: float) -> None:
        with self._lock:
            self._cached[key] = (conv, now)
            self._cached.move_to_end(key)
            while len(self._cached) > self.limit:
                self._cached.popitem(last=False)

    def _owner(self, item: Admitted) -> str:
        """The user owning the key's sessions: the person, or the chat when shared."""
        if item.key.shared:
            return self.people.chat_owner(item.event.platform, item.event.chat.id)
        return item.person.user_id


class Turns:
    def __init__(
        self,
        agent: Agent,
        db: SessionDB,
        delivery: Delivery,
        adapters: Mapping[str, PlatformAdapter],
        conversations: LiveConversations,
        *,
        command: Callable[[Admitted], Awaitable[None]],
        streams: Callable[[str], bool],
        media: MediaIntake | None = None,
    ) -> None:
        """`command` runs a command met in line; `streams` says whether replies on a
        platform are shown as they are written."""
        self.agent, self.db, self.delivery, self.adapters = agent, db, delivery, adapters
        self.conversations, self.media = conversations, media
        self._command, self._streams = command, streams
        # several gateways: how far an interrupted item's turn got (SharedSessions)
        self.outcome: Callable[[Admitted], TurnOutcome] | None = None

    async def run(self, batch: Batch) -> None:
        first = batch[0]
        event = first.event
        adapter = self.adapters[event.platform]
        if first.interrupted and await self._settled_before(adapter, first):
            return
        prepared, answered = await self._attachments(adapter, event)
        if answered:
            return
        if event.text.startswith("/") and prepared is None:
            await self._command(first)
            return
        if (late := late_by(event)) is not None:
            note = LATE_NOTE.format(ago=ago(late))
            await self.delivery.deliver(adapter, event.chat, note, event.message_id)
        started = time.monotonic()
        if prepared is not None:
            text = prepared.text
        else:
            text = "\n\n".join(item.event.text.strip() for item in batch)
        surface = surface_of(event)
        conv = await self.conversations.aof(first, surface)
        speaker = Speaker(first.person.user_id, first.person.display_name or "someone")
        last = batch[-1].event
        stream = self._stream(adapter, last)
        typing = asyncio.create_task(keep_typing(adapter, event.chat))
        try:
            ids = ",".join(item.event.message_id for item in batch)
            result = await self.agent.turn(
                conv,
                text,
                surface,
                platform_message_id=ids,
                speaker=speaker,
                stream=stream,
                images=prepared.images if prepared is not None else (),
            )
        except asyncio.CancelledError:
            if stream is not None:
                await stream.stopped()  # what was shown stays, marked as stopped
            raise
        finally:
            typing.cancel()
        if result.duplicate:
            return
        if prepared is not None and self.media is not None:  # kept, by reference
            await self.db.run(self.media.record, prepared, result.session_id, conv.user_id, self.db)
        await self._hand_over(
            adapter, last, result.text, result.reply_id, stream=stream, failed=not result.ok
        )
        logger.info(  # who and where, never what was said
            "turn %s: %s %s chat %s, user %s, session %s, %d message(s), %.2f s",
            "answered" if result.ok else "failed",
            event.platform,
            event.chat.type.value,
            event.chat.id,
            first.person.user_id,
            conv.id,
            len(batch),
            time.monotonic() - started,
        )

    async def _hand_over(
        self,
        adapter: PlatformAdapter,
        event: MessageEvent,
        text: str,
        reply_id: int | None,
        *,
        stream: StreamedReply | None = None,
        failed: bool = False,
    ) -> None:
        """A turn's reply to the platform, its stored row saying where it is on its way:
        "sending" before (should this instance stop in between, nobody sends it twice),
        then "sent", "unknown" or "failed"."""
        mark = self.db.conversations.set_delivery
        if reply_id is not None:
            await self.db.run(mark, reply_id, "sending")
        if stream is not None:
            ok = await stream.finish(text, stored_id=reply_id, failed=failed)
            state = "sent" if ok else "failed"
        else:
            sent = await self.delivery.send(
                adapter, event.chat, text, event.message_id, stored_id=reply_id, failed=failed
            )
            state = "sent" if sent.ok else "unknown" if sent.outcome_unknown else "failed"
        if reply_id is not None:
            await self.db.run(mark, reply_id, state)

    async def _settled_before(self, adapter: PlatformAdapter, item: Admitted) -> bool:
        """An item whose first holder stopped or died mid-turn (several gateways):
        whether it was settled already: its reply handed to the platform (sent, or its
        outcome unknown: never twice), its reply stored and never handed over (it is
        sent now), or its model call in flight (the person is asked to send it again)."""
        if self.outcome is None:
            return False
        done = await self.db.run(self.outcome, item)
        event = item.event
        if done.state == "asked":
            await self.delivery.deliver(adapter, event.chat, ASK_AGAIN, event.message_id)
        elif done.state == "unsent":
            await self._hand_over(adapter, event, done.reply, done.reply_id)
        return done.state != "new"

    async def _attachments(
        self, adapter: PlatformAdapter, event: MessageEvent
    ) -> tuple[Prepared | None, bool]:
        """The message's files made ready for its turn (downloads, transcription), and
        whether it was answered already (nothing in it could be used, or no text)."""
        if event.attachments and self.media is not None:
            typing = asyncio.create_task(keep_typing(adapter, event.chat))
            try:
                prepared = await self.media.prepare(adapter, event)
            finally:
                typing.cancel()
            if prepared.reply is None:
                return prepared, False
            await self.delivery.deliver(adapter, event.chat, prepared.reply, event.message_id)
            return None, True
        if event.text.strip():
            return None, False
        kinds: list[str] = sorted({a.kind for a in event.attachments}) or ["that"]
        note = NO_TEXT_REPLY.format(what=" or ".join(kinds))
        await self.delivery.deliver(adapter, event.chat, note, event.message_id)
        return None, True

    def _stream(self, adapter: PlatformAdapter, event: MessageEvent) -> StreamedReply | None:
        """The live view of this turn's reply, when streaming is on and possible here."""
        group = event.chat.type is not ChatType.DM
        interval = adapter.capabilities.edit_interval(group)
        if interval is None or not self._streams(adapter.name):
            return None
        return StreamedReply(adapter, event.chat, event.message_id, self.delivery, interval)


def late_by(event: MessageEvent) -> float | None:
    """How long before the gateway received it the message was written, when that is
    past LATE_AFTER_S (the gateway was down, or its platform not connected; a message
    that only waited in its chat's line behind a long turn is not late)."""
    if not event.sent_at:  # unknown (None, or 0 from a platform that has none)
        return None
    waited = event.received_at.timestamp() - event.sent_at
    return waited if waited > LATE_AFTER_S else None


def ago(seconds: float) -> str:
    """'12 minutes', '3 hours', '2 days': the largest whole unit."""
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{int(seconds)} seconds"


async def keep_typing(adapter: PlatformAdapter, chat: ChatRef) -> None:
    """Show "typing…" from TYPING_AFTER_S on, renewed every 4 s, until cancelled."""
    with contextlib.suppress(Exception):
        await asyncio.sleep(TYPING_AFTER_S)  # a quick answer needs no indicator
        while True:
            await adapter.typing(chat)
            await asyncio.sleep(4)


__all__ = ["ASK_AGAIN", "NO_TEXT_REPLY", "LiveConversations", "Turns", "keep_typing", "surface_of"]
