"""The gateway process: platform adapters, the router and the scheduler in one loop.

Start order: adapters (each on its own: one failing to start is logged and shown in
status, the others run), then the scheduler. Stop order: the scheduler (waiting for
running jobs), stop intake and let running turns finish within a bound, then adapters.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from gateway import registry
from gateway.app import App, build_app
from gateway.config import ConfigError, HermesConfig, main_endpoint
from gateway.http_server import HttpServer, WebhookAdapter
from gateway.platform_config import PlatformConfig
from gateway.ports import PlatformAdapter
from gateway.scheduler import Scheduler
from gateway.status_file import remove_status_file, write_status_file
from hermes.memory.sweep import users_with_memory
from hermes.state.db import SessionDB
from hermes.state.engine import StateDBError, explain

logger = logging.getLogger(__name__)
TURN_GRACE_S = 20.0


class Gateway:
    def __init__(
        self, home: Path, config: HermesConfig, db: SessionDB, env: Mapping[str, str] | None = None
    ) -> None:
        self.home, self.config, self.db, self.env = home, config, db, env
        damage = db.upkeep.quick_check()  # pages overwritten go unnoticed otherwise
        if damage != "ok":
            raise StateDBError(explain(db.path, Exception(damage)))
        self.scheduler = Scheduler(home, config, db)
        self.http = HttpServer(config.gateway.http.host, config.gateway.http.port, self.status)
        self.adapters: dict[str, PlatformAdapter] = {}
        self.failed: dict[str, str] = {}
        self.platforms = self._enabled()
        self.app: App | None = None
        if main_endpoint(config, env) is not None:
            self.app = build_app(home, config, db, env=env, runtime=self)
        elif self.platforms:
            raise ConfigError(
                "platforms are enabled but no model is configured (llm.base_url, llm.model)"
            )
        self.started_at: float | None = None
        self._stopping = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    def _enabled(self) -> dict[str, PlatformConfig]:
        sections = self.config.platforms
        return {
            name: section
            for name in type(sections).model_fields
            if (section := getattr(sections, name)).enabled
        }

    # -- RuntimeInfo, for /admin status ---------------------------------------------------

    def uptime_s(self) -> float | None:
        return time.monotonic() - self.started_at if self.started_at is not None else None

    def adapter_states(self) -> dict[str, str]:
        return self.status()

    async def llm_health(self) -> str:
        if self.app is None:
            return "no model configured"
        return await self.app.health()

    async def start(self) -> None:
        if self.app is not None:  # settle what a crash left between stores and state.db
            for user_id in users_with_memory(self.home):
                await asyncio.to_thread(self.app.agent.memory.reconcile, user_id)
        built: dict[str, PlatformAdapter] = {}
        menu = self.app.commands.menu() if self.app is not None else []
        for name, section in self.platforms.items():
            try:
                built[name] = registry.build(name, section, self.env, menu)
            except Exception as exc:
                self._failed(name, exc)
        for adapter in built.values():
            if isinstance(adapter, WebhookAdapter):
                for route in adapter.routes():
                    self.http.add(route)
        await self.http.start()  # before the adapters: webhooks must find it listening
        for name, adapter in built.items():
            await self._start_platform(name, adapter)
        await self.scheduler.start()
        if self.app is not None:
            self._watcher = asyncio.create_task(self.app.router.watch_people())
        self.started_at = time.monotonic()
        write_status_file(self.home, self.status(), f"{self.http.host}:{self.http.port}")
        logger.info("gateway started: %s", ", ".join(self.adapters) or "no platforms")

    async def _start_platform(self, name: str, adapter: PlatformAdapter) -> None:
        """Attach, then start: events may arrive before start() returns (Discord syncs
        its commands after connecting), and the router must know the adapter by then."""
        assert self.app is not None  # platforms need a model (checked in __init__)
        router = self.app.router
        router.attach(adapter)
        try:
            await adapter.start(router.handle)
        except Exception as exc:  # one platform failing must not take the others down
            router.detach(name)
            self._failed(name, exc)
            return
        self.adapters[name] = adapter
        logger.info("platform %s connected", name)

    def _failed(self, name: str, exc: Exception) -> None:
        logger.error("platform %s failed to start: %s: %s", name, type(exc).__name__, exc)
        self.failed[name] = f"{type(exc).__name__}: {exc}"

    def status(self) -> dict[str, str]:
        states = {name: "connected" for name in self.adapters}
        states.update({name: f"failed: {why}" for name, why in self.failed.items()})
        return states

    async def stop(self) -> None:
        """Stop intake (what is not received stays with the platforms), the scheduler,
        then let running and queued turns finish within TURN_GRACE_S, then disconnect."""
        self.http.close_intake()
        if self._watcher is not None:
            self._watcher.cancel()
        for name, adapter in list(self.adapters.items()):
            try:
                await adapter.stop_intake()
            except Exception:
                logger.exception("platform %s did not stop receiving cleanly", name)
        await self.scheduler.stop()
        if self.app is not None:
            await self.app.router.stop(TURN_GRACE_S)
        for name, adapter in list(self.adapters.items()):
            try:
                await adapter.stop()
            except Exception:
                logger.exception("platform %s did not stop cleanly", name)
        await self.http.stop()
        if self.app is not None:
            await self.app.close()
        remove_status_file(self.home)
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
