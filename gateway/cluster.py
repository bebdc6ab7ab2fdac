"""This gateway process as one of several on one PostgreSQL database.

Each instance has an id (host, pid and a random part) and a row in
`gateway_instances`. Every third of `gateway.cluster.lease_seconds` it renews its row
and every lease it holds in one statement (sessions being worked, the maintenance
leader, Discord's connection), and tries for the leader lease (in a thread of its own,
while the event loop is alive). Beside that it
- listens for wake-ups (NOTIFY): events queued by other instances for a session it
  holds, and `/stop` sent to another instance for a turn it runs;
- polls every `poll_seconds` for sessions with waiting events that nobody holds (a
  lost wake-up, or a holder that died and whose lease expired) on the platforms it has,
  and takes them (gateway/pipeline/shared.py).
A clean stop hands back what it had taken but not worked and frees its leases at once;
a killed instance's leases expire `lease_seconds` after its last renewal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.edge.platform_config import ClusterConfig
from gateway.pipeline.router import Router
from hermes import metrics
from hermes.backoff import Backoff
from hermes.state.cluster import ANYONE, INBOX_CHANNEL, STOP_CHANNEL, Instance
from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)

LEADER = "leader"


def platform_lease(name: str) -> str:
    return f"platform:{name}"


class Cluster:
    def __init__(self, db: SessionDB, config: ClusterConfig) -> None:
        self.db, self.config = db, config
        self.cluster = db.cluster
        self.host = socket.gethostname()
        self.id = f"{self.host}:{os.getpid()}:{secrets.token_hex(3)}"
        self.lease_s = config.lease_seconds
        self.held: set[str] = set()  # the leases renewed at the last heartbeat
        self.leader = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.router: Router | None = None
        self.info: Callable[[], dict[str, Any]] = dict
        # after each heartbeat, with the leases still held (the runtime checks its
        # platform leases there)
        self.on_beat: Callable[[set[str]], Coroutine[Any, Any, None]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.listening = asyncio.Event()
        self._snapshot: dict[str, Any] = {}  # info(), as of the loop's last heartbeat
        self._stopping = threading.Event()
        self._beater: threading.Thread | None = None
        self._alive_at = time.monotonic()  # the loop ran a heartbeat's callback then

    def others(self) -> list[str]:
        """The ids of the other live instances."""
        return self.cluster.others_alive(self.id, self.lease_s)

    def earlier(self) -> list[Instance]:
        """The other live instances that started before this one (ties: by id), so of
        two starting at once exactly one sees the other as earlier."""
        alive = [i for i in self.cluster.instances(self.lease_s) if i.alive]
        mine = next((i for i in alive if i.id == self.id), None)
        if mine is None:
            return [i for i in alive if i.id != self.id]
        return [i for i in alive if (i.started_at, i.id) < (mine.started_at, mine.id)]

    def start(self, router: Router | None) -> None:
        """Register, then beat (in a thread of its own), listen and poll until `stop`."""
        self.router = router
        self._snapshot = self.info()
        self.cluster.register(self.id, self.host, os.getpid(), self._snapshot)
        self.leader = self.cluster.acquire(LEADER, self.id, self.lease_s)
        self._loop = asyncio.get_running_loop()
        self._alive_at = time.monotonic()
        self._stopping.clear()
        self._beater = threading.Thread(target=self._beat, name="cluster-heartbeat", daemon=True)
        self._beater.start()
        if router is not None and router.shared is not None:
            self._tasks += [asyncio.create_task(self._listen()), asyncio.create_task(self._poll())]

    def publish(self) -> None:
        """Renew now, with what this instance holds and shows (its platforms changed)."""
        self._snapshot = self.info()
        try:
            self.held = self.cluster.renew(self.id, self.lease_s, self._snapshot)
        except Exception as exc:
            logger.warning("could not publish this instance's state: %s", exc)

    def lead(self) -> bool:
        """Whether this instance is the maintenance leader now (asked of the database:
        taken when free or expired, kept when ours)."""
        self.leader = self.cluster.acquire(LEADER, self.id, self.lease_s)
        return self.leader

    def hold(self, name: str) -> bool:
        """Take or keep the lease `name` (a platform's one connection)."""
        if self.cluster.acquire(name, self.id, self.lease_s):
            self.held.add(name)
            return True
        return False

    def holder(self, name: str) -> str | None:
        return self.cluster.holder(name)

    def _beat(self) -> None:
        """Every third of the lease: renew the row and every lease, try for the leader.
        In a thread of its own, so busy workers (the default executor full of turns
        waiting on the database) never delay it; but only while the event loop shows it
        is alive: a loop stalled for most of a lease lets the leases lapse, so a wedged
        process does not keep its sessions."""
        every = self.lease_s / 3
        while not self._stopping.wait(every):
            # asked every beat, renewed or not: a loop that ran again (a stall, a
            # suspended process) is seen alive at the next beat, which renews, finds
            # what was lost meanwhile and lets the runtime give it up
            self._ask_alive()
            if time.monotonic() - self._alive_at > self.lease_s - every:
                logger.warning("the event loop is stalled: not renewing this instance's leases")
                continue
            try:
                held = self.cluster.renew(self.id, self.lease_s, self._snapshot)
                leader = self.cluster.acquire(LEADER, self.id, self.lease_s)
            except Exception as exc:  # the database gone: leases lapse; we try again
                logger.warning("cluster heartbeat failed: %s", exc)
                held, leader = set(), False
            self.held, self.leader = held, leader
            if self._loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed: stopping
                    self._loop.call_soon_threadsafe(self._beaten, held)

    def _ask_alive(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed: stopping
                self._loop.call_soon_threadsafe(self._answer_alive)

    def _answer_alive(self) -> None:
        self._alive_at = time.monotonic()

    def _beaten(self, held: set[str]) -> None:
        """On the loop, after each heartbeat: it is alive; what to show next time; the
        runtime checks its platform leases."""
        self._alive_at = time.monotonic()
        self._snapshot = self.info()
        for kind in ("session", "leader", "platform"):
            count = sum(1 for name in held if name.split(":", 1)[0] == kind)
            metrics.LEASES_HELD.labels(kind).set(count)
        if self.on_beat is not None:
            task = asyncio.create_task(self.on_beat(held))
            self._tasks.append(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("checking the held platforms failed: %r", task.exception())

    async def _listen(self) -> None:
        waits = Backoff(1.0, 30.0)
        while True:
            try:
                async for channel, payload in self.cluster.notifications(
                    [INBOX_CHANNEL, STOP_CHANNEL], self.listening
                ):
                    waits = Backoff(1.0, 30.0)
                    await self._woken(channel, payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # polling keeps working meanwhile
                logger.warning("cluster wake-ups lost (%s); listening again", exc)
            self.listening.clear()
            await asyncio.sleep(waits.next())

    async def _woken(self, channel: str, payload: str) -> None:
        """A wake-up for the holder of a session (`<holder> <key>`), or for anyone
        (`* <key>`: a stopping instance let it go; whoever claims it first works it)."""
        holder, _, key = payload.partition(" ")
        router = self.router
        anyone = holder == ANYONE and channel == INBOX_CHANNEL
        if (holder != self.id and not anyone) or router is None or router.shared is None:
            return
        try:
            if channel == STOP_CHANNEL:
                router.lanes.cancel_running(key)
            else:
                await router.shared.take(key)
        except Exception:
            logger.exception("a wake-up for session %s failed", key)

    async def _poll(self) -> None:
        assert self.router is not None and self.router.shared is not None
        shared, router = self.router.shared, self.router
        while True:
            await asyncio.sleep(self.config.poll_seconds)
            platforms = list(router.adapters)
            if not platforms:
                continue
            try:
                keys = await asyncio.to_thread(self.cluster.orphaned, self.id, platforms)
                for key in keys:
                    await shared.take(key)
            except Exception as exc:
                logger.warning("looking for waiting sessions failed: %s", exc)

    async def stop(self) -> None:
        """Stop beating and listening, hand back what was taken but not worked, free
        every lease (after the router has let its turns finish)."""
        self._stopping.set()
        if self._beater is not None:
            await asyncio.to_thread(self._beater.join, 10)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        try:
            await asyncio.to_thread(self.cluster.retire, self.id)
        except Exception as exc:
            logger.warning("could not hand back this instance's work: %s (its leases expire)", exc)


__all__ = ["LEADER", "Cluster", "platform_lease"]
