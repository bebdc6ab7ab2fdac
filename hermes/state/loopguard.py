"""Database work on the event loop's thread, found as it happens.

The gateway is one asyncio loop serving every chat: a repository call made on it waits
there for SQLite's write lock or PostgreSQL's answer, and every chat waits with it. Async
code awaits the repositories through `SessionDB.run` (the database executor) instead. This
guard watches one loop (`GUARD.watching(loop)`: the gateway's, or a test's): every
connection taken from an engine's pool on that loop's thread is counted
(`hermes_db_calls_on_loop`), logged once per place in the code with where it came from,
and kept in `seen` (a test asserts it stays empty). The CLI, which has no chats to keep
waiting, is not watched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, event

from hermes import metrics
from hermes.callers import ours, shown

logger = logging.getLogger(__name__)
_NOT_A_CALLER = ("/hermes/state/", "/contextlib.py")
_WAYS_IN = (  # the product's: messages, commands, scheduled work
    "/gateway/pipeline/",
    "/gateway/commands/",
    "/gateway/admission/",
    "/adapters/",
    "/gateway/jobs.py",
    "/gateway/reminders.py",
    "/gateway/scheduler.py",
)


class LoopGuard:
    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.seen: list[str] = []  # where each call on the loop came from (our code)
        self._logged: set[str] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def watching(self, loop: asyncio.AbstractEventLoop) -> Iterator[list[str]]:
        """Watch `loop` until the block ends; yields `seen`, emptied first."""
        with self._lock:
            self.loop, self.seen = loop, []
        try:
            yield self.seen
        finally:
            with self._lock:
                if self.loop is loop:
                    self.loop = None

    def checkout(self, *_: Any) -> None:
        """The pool's checkout event: on the watched loop's thread, a call to report."""
        loop = self.loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return  # a worker thread (the database executor), or no loop at all
        if running is not loop:
            return
        frames = ours(skip=_NOT_A_CALLER)
        if _a_tests_own(frames):
            return
        place = shown(frames, 5)
        metrics.DB_CALLS_ON_LOOP.inc()
        with self._lock:
            self.seen.append(place)
            first = place not in self._logged
            self._logged.add(place)
        if first:
            logger.warning(
                "database work on the event loop (every chat waits for it): %s; await it "
                "through SessionDB.run",
                place,
            )


def _a_tests_own(frames: list[Any]) -> bool:
    """Work a test's own code asked for directly (setting up, or reading what it
    checks), not through the product's ways in (the pipeline, commands, adapters, the
    scheduler's jobs): a
    test frame is met before any of theirs, going outwards."""
    for frame in frames:
        if "/tests/" in frame.filename:
            return True
        if any(part in frame.filename for part in _WAYS_IN):
            return False
    return False


GUARD = LoopGuard()


def guard(engine: Engine) -> None:
    """Report connections `engine` hands out on the watched loop's thread."""
    event.listen(engine, "checkout", GUARD.checkout)


__all__ = ["GUARD", "LoopGuard", "guard"]
