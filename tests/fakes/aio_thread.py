"""An aiohttp application served on 127.0.0.1 from its own thread and event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, Self, TypeVar

from aiohttp import web

T = TypeVar("T")


class AioThread:
    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10), "the fake server did not start"

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the server's loop from a test thread and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def stop(self) -> None:
        self.call(self._runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._runner = web.AppRunner(self.app)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self.loop.run_forever()
        self._finish()

    def _finish(self) -> None:
        """End the loop as `asyncio.run` ends one: a connection still open after the
        runner's cleanup (a client that kept its websocket) has its task cancelled and
        awaited, so it closes its transport here instead of leaving it for the garbage
        collector to find open (a ResourceWarning in whichever test runs then)."""
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        gathered = asyncio.gather(*pending, return_exceptions=True)
        self.loop.run_until_complete(gathered)
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())


class AioFake:
    """Base of the fakes served by an AioThread (set `self._server` in __init__)."""

    _server: AioThread

    def start(self) -> Self:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    @property
    def port(self) -> int:
        return self._server.port
