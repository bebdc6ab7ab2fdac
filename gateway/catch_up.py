"""Catching up on a platform that does not redeliver (gateway/edge/ports.py `CatchesUp`).

Discord sends a message to the connection open at that moment, and a new gateway
session replays nothing: what was sent while the gateway restarted, or while another
instance took the connection's lease over from one that died, never arrives by
itself. So the gateway notes the last message read in each chat (`platform_marks`, each
second's notes in one write, and at the stop), and whenever the platform connects
it asks the adapter for what came after each chat's mark (chats read within CATCH_UP_WINDOW,
the latest MOST_MARKS, at most MOST_PER_CHAT messages each) and hands those to the router
as if they had just arrived: once (intake drops what it has seen; with several
gateways the database does), and in order (live messages that arrive meanwhile wait
behind them).
"""

from __future__ import annotations

import asyncio
import logging

from gateway.edge.events import ChatRef, MessageEvent
from gateway.edge.ports import CATCH_UP_WINDOW, MOST_MARKS, CatchesUp, ChatMark, EventSink
from hermes.places import ChatType
from hermes.state.db import SessionDB
from hermes.state.marks import Mark
from hermes.state.models import utcnow
from hermes.state.retry import StateDBError

logger = logging.getLogger(__name__)

FLUSH_S = 1.0  # marks are written this often (and at the stop)
MOST_PER_CHAT = 100
CATCH_UP_TIMEOUT_S = 60.0  # live messages wait behind a catch-up at most this long


class CatchUp:
    def __init__(self, db: SessionDB) -> None:
        self.db = db
        self._pending: dict[tuple[str, str], Mark] = {}
        self._held: dict[str, list[MessageEvent]] = {}  # platform: live events waiting

    def sink(self, platform: str, handle: EventSink) -> EventSink:
        """`handle` with each event's chat noted first; while `platform` catches up,
        live events wait."""

        async def noted(event: MessageEvent) -> None:
            if (held := self._held.get(platform)) is not None:
                held.append(event)
                return
            self.note(event)
            await handle(event)

        return noted

    def note(self, event: MessageEvent) -> None:
        """`event`'s message as its chat's mark (written at the next flush)."""
        if event.order <= 0 or event.pressed:  # button presses and commands are no messages
            return
        key = (event.platform, event.chat.id)
        known = self._pending.get(key)
        if known is None or event.order > known.position:
            chat = event.chat
            self._pending[key] = Mark(
                event.platform, chat.id, chat.type.value, chat.thread_id, event.message_id,
                event.order,
            )  # fmt: skip

    async def flush(self) -> None:
        """Write the marks noted since the last flush (kept for the next one when the
        database cannot take them now)."""
        if not self._pending:
            return
        marks, self._pending = self._pending, {}
        try:
            await self.db.run(self.db.marks.note, list(marks.values()))
        except StateDBError as exc:
            logger.warning("where each chat was last read could not be saved (%s): retrying", exc)
            for key, mark in marks.items():
                newer = self._pending.get(key)
                if newer is None or newer.position < mark.position:
                    self._pending[key] = mark

    async def flushing(self) -> None:
        """Flush every FLUSH_S (until cancelled: the stop flushes once more itself)."""
        while True:
            await asyncio.sleep(FLUSH_S)
            await self.flush()

    def hold(self, platform: str) -> None:
        """From now until `release`, `platform`'s live events wait (a start begins)."""
        self._held.setdefault(platform, [])

    async def release(self, platform: str, handle: EventSink, *, keep: bool = True) -> None:
        """Hand over what waited (`keep` False: a start that failed; what it received
        is fetched again at the next one)."""
        waited = self._held.pop(platform, [])
        for event in waited if keep else ():
            self.note(event)
            await handle(event)

    async def catch_up(self, adapter: CatchesUp, handle: EventSink) -> None:
        """What `adapter`'s platform received while this gateway was not connected,
        handed to `handle` in order; then the live events that waited. Never raises:
        a platform that cannot list its history now is only logged."""
        self.hold(adapter.name)
        try:
            found = await asyncio.wait_for(self._missed(adapter), CATCH_UP_TIMEOUT_S)
        except Exception as exc:  # a catch-up that fails must not stop the platform
            logger.warning("platform %s: could not fetch what was missed: %s", adapter.name, exc)
            found = []
        try:
            for event in found:
                self.note(event)
                await handle(event)
        finally:
            await self.release(adapter.name, handle)
        if found:
            logger.info(
                "platform %s: %d message(s) sent while it was not connected, caught up",
                adapter.name,
                len(found),
            )

    async def _missed(self, adapter: CatchesUp) -> list[MessageEvent]:
        since = utcnow() - CATCH_UP_WINDOW
        marks = await self.db.run(self.db.marks.recent, adapter.name, since, MOST_MARKS)
        chats = [
            ChatMark(
                ChatRef(m.chat_id, ChatType(m.chat_type), m.thread_id), m.message_id, m.position
            )
            for m in marks
        ]
        return await adapter.missed(chats, MOST_PER_CHAT)


__all__ = ["CatchUp"]
