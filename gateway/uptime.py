"""This gateway's record of its platforms' states over time (state.db `platform_spans`,
hermes/state/platform_health.py): told each state the gateway publishes, it writes a
change within moments and renews what lasts every RENEW_S, on the database executor;
a clean stop ends its spans. The dashboard's platform health reads them."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gateway.dashboard.health import span_state
from hermes.state.db import SessionDB
from hermes.state.platform_health import RENEW_S, OpenSpan

logger = logging.getLogger(__name__)


class UptimeLog:
    def __init__(self, db: SessionDB, instance: str, renew_s: float = RENEW_S) -> None:
        self.db, self.instance, self.renew_s = db, instance, renew_s
        self._states: dict[str, tuple[str, str]] = {}  # platform -> (state, why), as told
        self._open: dict[str, OpenSpan] = {}  # as written
        self._changed = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def note(self, statuses: dict[str, str]) -> None:
        """The platforms' states now, as `hermes gateway status` says them (on the event
        loop, at once: the write follows on the executor)."""
        states = {name: found for name, said in statuses.items() if (found := span_state(said))}
        if {n: s for n, (s, _) in states.items()} != {n: s for n, (s, _) in self._states.items()}:
            self._changed.set()
        self._states = states

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.renew_s)
            if self._closing:
                return
            self._changed.clear()
            await self._write(self._states)

    async def close(self) -> None:
        """End this instance's spans now (the gateway stops)."""
        self._closing = True
        self._changed.set()
        if self._task is not None:
            await self._task
        if self._open:
            await self._write({})

    async def _write(self, states: dict[str, tuple[str, str]]) -> None:
        try:
            self._open = await self.db.run(
                self.db.platform_health.record, self.instance, dict(states), dict(self._open)
            )
        except Exception as exc:  # the next change or renewal tries again
            logger.warning("platform states not recorded: %s: %s", type(exc).__name__, exc)
