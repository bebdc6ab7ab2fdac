"""The event loop's lag, measured, and a stall said with where it happened.

A timer runs every TICK_S on the loop; how late it ran is observed as
`hermes_event_loop_lag_seconds`. While the loop is stuck (no tick for STALL_S), a
watchdog thread looks at what the loop's thread is doing (its stack, our code's frames);
when the loop runs again one warning line says how long it stalled and where, so a
blocking call that slips into async code is found from the log, not from users waiting.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time

from hermes import metrics
from hermes.callers import where

logger = logging.getLogger(__name__)

TICK_S = 0.05
STALL_S = 0.1  # a stall longer than this is logged


class LoopWatch:
    def __init__(self, tick: float = TICK_S, stall: float = STALL_S) -> None:
        self.tick, self.stall = tick, stall
        self.stalls = 0  # stalls logged
        self.worst = 0.0  # the longest lag seen (seconds)
        self._beat = time.monotonic()
        self._where = ""  # what the loop's thread ran when the watchdog found it stuck
        self._done = threading.Event()

    async def run(self) -> None:
        """Run as a task for the gateway's life; cancel it to stop."""
        loop = asyncio.get_running_loop()
        thread = threading.get_ident()
        dog = threading.Thread(target=self._watch, args=(thread,), name="loop-watch", daemon=True)
        self._beat = time.monotonic()
        dog.start()
        try:
            while True:
                before = loop.time()
                await asyncio.sleep(self.tick)
                lag = max(0.0, loop.time() - before - self.tick)
                self._beat = time.monotonic()
                metrics.EVENT_LOOP_LAG.observe(lag)
                self.worst = max(self.worst, lag)
                if lag > self.stall:
                    self.stalls += 1
                    place, self._where = self._where, ""
                    logger.warning(
                        "the event loop was blocked for %.2f s (every chat waited)%s",
                        lag,
                        f": {place}" if place else "",
                    )
        finally:
            self._done.set()

    def _watch(self, thread: int) -> None:
        """The watchdog: while no tick has come for `stall`, note the loop thread's frames
        (the first look of each stall: where it got stuck)."""
        while not self._done.wait(self.tick):
            if self._where or time.monotonic() - self._beat < self.stall:
                continue
            frame = sys._current_frames().get(thread)
            if frame is None:
                continue
            self._where = where(frame, count=4)


__all__ = ["STALL_S", "TICK_S", "LoopWatch"]
