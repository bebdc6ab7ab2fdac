"""One lane per session: the admitted items of a session key, worked one turn at a time
in the order they were sent.

A lane exists while it has work: the first item starts its worker, which takes the next
item (or, with `queue_mode: merge`, the plain messages of one person waiting right behind
each other, as one batch), runs it, and ends when the queue is empty. `/stop` cancels
the batch running now (`cancel_running`); stopping the gateway waits for every worker.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway import logs
from gateway.admission.intake import Admitted
from gateway.admission.session_key import SessionKey
from gateway.edge.events import MessageEvent
from hermes import metrics
from hermes.state.engine import storage_problem

logger = logging.getLogger(__name__)

_arrivals = itertools.count()  # ties in sent_at keep arrival order

Batch = list[Admitted]


@dataclass
class _Lane:
    """The queue and worker of one session key. Waiting messages are kept in the order
    they were sent (the platform's timestamp), not the order they arrived in: an SDK
    handling deliveries concurrently (slack-bolt) may hand them over shuffled."""

    queue: list[tuple[float, int, int, Admitted]] = field(default_factory=list)  # a heap
    worker: asyncio.Task[None] | None = None
    current: asyncio.Task[None] | None = None  # the turn running now (/stop cancels it)

    def put(self, item: Admitted) -> None:
        sent = item.event.sent_at if item.event.sent_at is not None else time.time()
        heapq.heappush(self.queue, (sent, item.event.order, next(_arrivals), item))

    def take(self) -> Admitted:
        return heapq.heappop(self.queue)[3]

    def peek(self) -> Admitted | None:
        return self.queue[0][3] if self.queue else None


class Lanes:
    def __init__(
        self,
        run: Callable[[Batch], Coroutine[Any, Any, None]],
        crashed: Callable[[MessageEvent, str | None], Awaitable[None]],
        queue_mode: Literal["queue", "merge"] = "queue",
    ) -> None:
        """`run` works one batch; `crashed` answers the last message of a batch whose
        run raised (the person is never left without a reply), with the storage problem
        when that was the cause."""
        self._run, self._crashed, self.queue_mode = run, crashed, queue_mode
        self._lanes: dict[SessionKey, _Lane] = {}
        self.settled = 0  # items whose batch has run (answered, failed or stopped)
        # after each batch, with whether the lane has nothing left: several gateways
        # finish its rows in the database there (and may put more items in the lane)
        self.after: Callable[[SessionKey, Batch, bool], Awaitable[None]] | None = None

    def active(self, key: SessionKey) -> bool:
        """Whether `key`'s lane has a worker now."""
        return key in self._lanes

    def put(self, item: Admitted, window: float = 0.0) -> None:
        """Queue `item` in its session's lane; a new lane first waits `window` s, so a
        message sent just before (handed over later by the SDK) takes its place."""
        lane = self._lanes.setdefault(item.key, _Lane())
        lane.put(item)
        self._count_queued(item.event.platform)
        if lane.worker is None:
            lane.worker = asyncio.create_task(self._drain(item.key, lane, window))

    def cancel_running(self, key: SessionKey | str) -> bool:
        """Cancel the batch running in `key`'s lane (the key, or its stored form); False
        when none runs."""
        found = key if isinstance(key, SessionKey) else self._named(key)
        lane = self._lanes.get(found) if found is not None else None
        running = lane.current if lane is not None else None
        if running is None or running.done():
            return False
        running.cancel()
        return True

    def drop(self, platform: str) -> int:
        """Give up every lane of `platform` (this process lost its connection): what
        waits is dropped, a running turn cancelled; how many items."""
        dropped = 0
        for key, lane in list(self._lanes.items()):
            if key.platform != platform:
                continue
            dropped += len(lane.queue)
            lane.queue.clear()
            if lane.current is not None and not lane.current.done():
                lane.current.cancel()
                dropped += 1
        return dropped

    def clear(self, key: SessionKey) -> Batch:
        """Empty `key`'s queue (its turn running now, if any, runs on); what it held."""
        lane = self._lanes.get(key)
        if lane is None:
            return []
        items = [entry[3] for entry in sorted(lane.queue)]
        lane.queue.clear()
        return items

    def leave(self) -> list[tuple[SessionKey, Batch, bool]]:
        """Empty every lane's queue (this process is stopping; the waiting items go to
        another): per lane, what it held and whether a turn still runs in it (it runs
        on to its end; its lane ends after it)."""
        left = []
        for key, lane in list(self._lanes.items()):
            running = lane.current is not None and not lane.current.done()
            left.append((key, self.clear(key), running))
        return left

    def running(self, stored: str) -> bool:
        """Whether the lane of the key stored as `stored` has a worker now."""
        return self._named(stored) is not None

    def _named(self, stored: str) -> SessionKey | None:
        return next((key for key in self._lanes if str(key) == stored), None)

    def workers(self) -> list[asyncio.Task[None]]:
        return [lane.worker for lane in self._lanes.values() if lane.worker]

    async def _drain(self, key: SessionKey, lane: _Lane, window: float) -> None:
        """One turn at a time for this key, in the order sent; the lane ends when empty."""
        try:
            if window:
                await asyncio.sleep(window)  # let a message sent just before arrive too
            while lane.queue:
                batch = self._next_batch(lane)
                self._count_queued(batch[0].event.platform)
                with logs.turn():  # the turn's task, and its log lines, carry the id
                    lane.current = asyncio.create_task(self._run(batch))
                    try:
                        await lane.current
                    except asyncio.CancelledError:
                        task = asyncio.current_task()
                        if task is not None and task.cancelling():
                            raise  # the gateway is stopping, not a /stop
                    except Exception as exc:
                        if (problem := storage_problem(exc)) is not None:  # not a bug
                            logger.error("turn failed for %s: %s", key, problem)
                        else:
                            logger.exception("turn failed for %s", key)
                        await self._crashed(batch[-1].event, problem)
                    finally:
                        lane.current = None
                        self.settled += len(batch)
                    await self._ended(key, batch, lane)
        finally:
            self._lanes.pop(key, None)

    async def _ended(self, key: SessionKey, batch: Batch, lane: _Lane) -> None:
        """A batch ran to its end (answered, failed, or stopped by /stop; not one cut off
        by the gateway stopping): `after` is told."""
        if self.after is None:
            return
        try:
            await self.after(key, batch, not lane.queue)
        except Exception:  # the database gone: the rows stay; a holder takes them later
            logger.exception("could not record the end of a turn for %s", key)

    def _count_queued(self, platform: str) -> None:
        waiting = sum(
            1
            for lane in self._lanes.values()
            for *_, item in lane.queue
            if item.event.platform == platform
        )
        metrics.QUEUE_DEPTH.labels(platform).set(waiting)

    def _next_batch(self, lane: _Lane) -> Batch:
        """The next message; in merge mode with the plain messages of the same person
        waiting right behind it (commands and no-text messages always go alone)."""
        batch = [lane.take()]
        if self.queue_mode != "merge" or not _mergeable(batch[0]):
            return batch
        while (following := lane.peek()) is not None and _mergeable(following):
            if following.person.user_id != batch[0].person.user_id:
                break
            batch.append(lane.take())
        return batch


def _mergeable(item: Admitted) -> bool:
    """A plain message (an interrupted one goes alone: its outcome is checked first)."""
    text = item.event.text.strip()
    plain = bool(text) and not text.startswith("/") and not item.event.attachments
    return plain and not item.interrupted


__all__ = ["Batch", "Lanes"]
