"""Streamed replies: one message, edited in place as the model writes, finished exactly.

The agent reports the answer's text so far (and a note while tools run); a
`StreamedReply` shows it on the platform:

- nothing is posted before `interval` has passed: a quick answer arrives whole, in one
  message, exactly as without streaming;
- then the message is edited at most once per `interval` (the platform's edit limits,
  stricter in groups), never to the text it already shows, with a cursor at the end
  while it is being written; a 429 is waited out as long as the platform asks;
- text past the platform's limit continues in a new message (earlier ones stay full);
- `finish` makes the messages show exactly the final text (formatted), with bounded
  retries; a message that can no longer be edited (deleted meanwhile) is replaced by a
  new one, and messages left over from a longer draft are deleted.

Exactly once: nothing is ever posted twice. A post whose outcome is unknown (a timeout:
it may or may not be there) stops the live view; the final text then goes out through
normal delivery. The stored reply is the agent's, written once, whatever happened here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import dataclass

from gateway.edge.events import ChatRef, OutboundMessage, SendResult
from gateway.edge.ports import PlatformAdapter
from gateway.pipeline.delivery import Delivery, parts
from hermes import metrics

logger = logging.getLogger(__name__)

CURSOR = " ▌"
STOPPED_NOTE = "_(stopped)_"


@dataclass
class _Posted:
    id: str
    rendered: str  # what the message shows now (the platform's dialect)


class StreamedReply:
    """The live view of one turn's reply in one chat (agent.TurnStream)."""

    def __init__(
        self,
        adapter: PlatformAdapter,
        chat: ChatRef,
        reply_to: str | None,
        delivery: Delivery,
        interval: float,
    ) -> None:
        self.adapter, self.chat, self.reply_to = adapter, chat, reply_to
        self.delivery, self.interval = delivery, interval
        self._answer, self._status = "", ""
        self._posted: list[_Posted] = []
        self._lost = False  # a post of unknown outcome: the live view stopped
        self._closing = False
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._next_at = time.monotonic() + interval  # the first post waits one interval
        self._task: asyncio.Task[None] | None = None

    # -- agent.TurnStream --------------------------------------------------------------

    def text(self, so_far: str) -> None:
        self._answer, self._status = so_far, ""
        self._poke()

    def status(self, note: str) -> None:
        self._status = note
        self._poke()

    def _poke(self) -> None:
        if self._closing or self._lost:
            return
        self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    def _draft(self) -> str:
        answer = self._answer.rstrip()
        if self._status:
            note = f"_{self._status}_"
            return f"{answer}\n\n{note}" if answer else note
        return answer + CURSOR if answer else ""

    # -- the live view -----------------------------------------------------------------

    async def _run(self) -> None:
        while not self._closing and not self._lost:
            await self._changed.wait()
            if self._closing:
                return
            wait = self._next_at - time.monotonic()
            if wait > 0:  # until the next edit is allowed, or the end (which goes at once)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closed.wait(), wait)
                if self._closing:
                    return
            self._changed.clear()
            draft = self._draft()
            if draft:
                await self._show(draft)
            self._next_at = max(self._next_at, time.monotonic() + self.interval)

    async def _show(self, draft: str) -> None:
        """One round of updates towards `draft`; a refused one waits for the next."""
        for index, (part, rendered) in enumerate(parts(draft, self.adapter.capabilities)):
            if index < len(self._posted):
                posted = self._posted[index]
                if posted.rendered == rendered:
                    continue
                message = OutboundMessage(self.chat, part, rendered=rendered, partial=True)
                result = await self.adapter.edit(self.chat, posted.id, message)
                if not result.ok:
                    self._back_off(result)
                    return
                posted.rendered = rendered
                metrics.STREAM_EDITS.labels(self.adapter.name).inc()
                continue
            reply = self.reply_to if index == 0 else None
            message = OutboundMessage(self.chat, part, reply, rendered=rendered, partial=True)
            result = await self.adapter.send(message)
            if not result.ok:
                if not result.retryable:  # it may be there or not: never post it again
                    logger.warning(
                        "streamed reply to %s %s stopped: %s",
                        self.adapter.name,
                        self.chat.id,
                        result.error,
                    )
                    self._lost = True
                self._back_off(result)
                return
            self._posted.append(_Posted(result.message_ids[-1], rendered))
            metrics.MESSAGES_SENT.labels(self.adapter.name).inc()

    def _back_off(self, result: SendResult) -> None:
        wait = result.retry_after if result.retry_after is not None else self.interval
        self._next_at = time.monotonic() + max(wait, self.interval)

    async def _close(self) -> None:
        """Stop the live view after the call it is making (never cut one off mid-way:
        a post cancelled in flight could be there without its id)."""
        self._closing = True
        self._changed.set()
        self._closed.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task

    # -- the end -----------------------------------------------------------------------

    async def finish(
        self, text: str, *, stored_id: int | None = None, failed: bool = False
    ) -> bool:
        """Show exactly `text`, finished; False when some of it could not be delivered."""
        await self._close()
        if not self._posted:  # nothing shown yet (a quick answer), or the post was lost
            return await self.delivery.deliver(
                self.adapter, self.chat, text, self.reply_to, stored_id=stored_id, failed=failed
            )
        final = parts(text, self.adapter.capabilities)
        for index, (part, rendered) in enumerate(final):
            message = OutboundMessage(self.chat, part, failed=failed, rendered=rendered)
            if index < len(self._posted):
                ok = await self._finish_one(self._posted[index], message, stored_id)
            else:
                ok = await self._post(message, stored_id)
            if not ok:
                return False
        for extra in self._posted[len(final) :]:  # a longer draft than the answer
            await self.delivery.attempt(functools.partial(self.adapter.delete, self.chat, extra.id))
        return True

    async def stopped(self) -> None:
        """The turn was cancelled (/stop): what was shown stays, marked as stopped."""
        await self._close()
        if not self._posted:
            return
        answer = self._answer.rstrip()
        text = f"{answer}\n\n{STOPPED_NOTE}" if answer else STOPPED_NOTE
        final = parts(text, self.adapter.capabilities)
        last = min(len(final), len(self._posted)) - 1
        part, rendered = final[last]
        message = OutboundMessage(self.chat, part, rendered=rendered)
        await self._finish_one(self._posted[last], message, None)

    async def _finish_one(
        self, posted: _Posted, message: OutboundMessage, stored_id: int | None
    ) -> bool:
        rendered = message.as_sent(self.adapter.capabilities.render)
        if posted.rendered == rendered:
            return True  # already showing exactly this
        result, attempts = await self.delivery.attempt(
            lambda: self.adapter.edit(self.chat, posted.id, message)
        )
        if result.ok:
            posted.rendered = rendered
            metrics.STREAM_EDITS.labels(self.adapter.name).inc()
            return True
        if result.retryable:  # still refused after the retries: it shows the draft
            await self.delivery.record_failure(self.adapter, self.chat, stored_id, result, attempts)
            return False
        # the message cannot be edited any more (deleted meanwhile): the part anew
        logger.info("could not finish a streamed message (%s): sending it anew", result.error)
        return await self._post(message, stored_id)

    async def _post(self, message: OutboundMessage, stored_id: int | None) -> bool:
        result, attempts = await self.delivery.attempt(lambda: self.adapter.send(message))
        if not result.ok:
            await self.delivery.record_failure(self.adapter, self.chat, stored_id, result, attempts)
            return False
        metrics.MESSAGES_SENT.labels(self.adapter.name).inc()
        return True


__all__ = ["CURSOR", "STOPPED_NOTE", "StreamedReply"]
