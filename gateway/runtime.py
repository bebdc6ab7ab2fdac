"""The gateway process: platform adapters and the scheduler in one asyncio loop.

Start order: adapters, then the scheduler; stop order: the scheduler (waiting for
running jobs), then the adapters. Platform adapters arrive with the gateway issue; until
then the process runs the scheduler (consolidation, idle sessions, maintenance).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from gateway.config import HermesConfig
from gateway.scheduler import Scheduler
from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)


class Gateway:
    def __init__(self, home: Path, config: HermesConfig, db: SessionDB) -> None:
        self.home, self.config, self.db = home, config, db
        self.scheduler = Scheduler(home, config, db)
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        await self.scheduler.start()
        logger.info("gateway started (home %s)", self.home)

    async def stop(self) -> None:
        await self.scheduler.stop()
        logger.info("gateway stopped")

    def request_stop(self) -> None:
        self._stopping.set()

    async def serve(self) -> None:
        """Run until SIGTERM or SIGINT, then shut down cleanly."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        await self.start()
        try:
            await self._stopping.wait()
        finally:
            await self.stop()
