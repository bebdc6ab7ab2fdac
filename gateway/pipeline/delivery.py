"""Delivery: a reply's text to the platform, in parts that fit, sent at most once each.

Chunks are measured in the form that will be sent (the platform's own dialect, counted
the way the platform counts), so tags added by rendering never push a part over the
real limit. Each part is sent with bounded retries: an answered error that the adapter
marks retryable is sent again with backoff, a 429 is waited out exactly as long as
asked, and an unknown outcome (a timeout, a dropped connection) is never resent. A part
that cannot be delivered is recorded against the stored reply (`deliveries`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

from gateway.edge.chunking import chunk
from gateway.edge.events import ChatRef, OutboundMessage, SendResult
from gateway.edge.ports import Capabilities, PlatformAdapter
from hermes import metrics
from hermes.backoff import Backoff
from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)

MAX_SEND_ATTEMPTS = 4
FIRST_BACKOFF_S, MAX_BACKOFF_S = 1.0, 30.0


def parts(text: str, caps: Capabilities) -> list[tuple[str, str]]:
    """`text` (Markdown) in parts whose rendered form fits the platform's limit, each as
    (markdown, rendered)."""
    out: list[tuple[str, str]] = []
    pending = chunk(text, caps.max_length, caps.length)
    limit = caps.max_length
    while pending:
        part = pending.pop(0)
        rendered = caps.render(part)
        if caps.length(rendered) <= caps.max_length:
            out.append((part, rendered))
            continue
        # rendering grew it past the limit: split this part finer and measure again
        limit = max(1, min(limit, caps.length(part)) * 3 // 4)
        pending[:0] = chunk(part, limit, caps.length)
    return out


class Delivery:
    def __init__(self, db: SessionDB, max_attempts: int = MAX_SEND_ATTEMPTS) -> None:
        self.db, self.max_attempts = db, max_attempts

    async def deliver(
        self,
        adapter: PlatformAdapter,
        chat: ChatRef,
        text: str,
        reply_to: str | None,
        *,
        stored_id: int | None = None,
        failed: bool = False,
    ) -> bool:
        """Send `text`; `stored_id` is the assistant message it is (for the failure record)."""
        result = await self.send(adapter, chat, text, reply_to, stored_id=stored_id, failed=failed)
        return result.ok

    async def send(
        self,
        adapter: PlatformAdapter,
        chat: ChatRef,
        text: str,
        reply_to: str | None,
        *,
        stored_id: int | None = None,
        failed: bool = False,
    ) -> SendResult:
        """`deliver`, answering how it went: the first part that failed (after retries),
        or success with every part's message id."""
        ids: list[str] = []
        for index, (part, rendered) in enumerate(parts(text, adapter.capabilities)):
            reply = reply_to if index == 0 else None
            outbound = OutboundMessage(chat, part, reply, failed, rendered=rendered)
            result, attempts = await self.attempt(functools.partial(adapter.send, outbound))
            if not result.ok:
                await self.record_failure(adapter, chat, stored_id, result, attempts)
                return result
            ids += result.message_ids
            metrics.MESSAGES_SENT.labels(adapter.name).inc()
        return SendResult(True, tuple(ids))

    async def record_failure(
        self,
        adapter: PlatformAdapter,
        chat: ChatRef,
        stored_id: int | None,
        result: SendResult,
        attempts: int,
    ) -> None:
        """A part that could not be delivered: counted, logged, recorded on the reply."""
        metrics.DELIVERIES_FAILED.labels(adapter.name).inc()
        logger.warning("could not deliver to %s %s: %s", adapter.name, chat.id, result.error)
        await self.db.run(
            self.db.conversations.record_delivery,
            stored_id,
            adapter.name,
            chat.id,
            ok=False,
            attempts=attempts,
            error=result.error,
        )

    async def attempt(self, call: Callable[[], Awaitable[SendResult]]) -> tuple[SendResult, int]:
        """`call` (a send or an edit) with bounded retries: only what the adapter marks
        retryable is made again; a 429 is waited out exactly as long as asked."""
        waits = Backoff(FIRST_BACKOFF_S, MAX_BACKOFF_S)
        result = SendResult(False, error="not sent")
        for attempt in range(1, self.max_attempts + 1):
            result = await call()
            if result.ok or not result.retryable:
                return result, attempt
            if attempt == self.max_attempts:
                break
            if result.retry_after is not None:
                await asyncio.sleep(result.retry_after)  # exactly what the platform asked
            else:
                await asyncio.sleep(waits.next())
        return result, self.max_attempts


__all__ = ["Delivery", "parts"]
