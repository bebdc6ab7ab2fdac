"""The gateway's built-in HTTP server (aiohttp): health, and platform webhooks.

`GET /healthz` answers with the platforms' state and uptime (for systemd, containers
and load balancers). Adapters that receive pushes over HTTP (Telegram webhook mode)
register their routes before the server starts.

Every connection is bounded (`_Guard`, around aiohttp's protocol): at most
`max_connections` at once (more are closed as they arrive), and each request must have
arrived, and its response begun, within `read_timeout` of the connection's start or of
the last response (a client trickling headers or a body is cut off). Bodies are capped
at 1 MiB. A flood is logged once a minute, not once a connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from aiohttp import web

from hermes import metrics

logger = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HttpServerError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler


@runtime_checkable
class WebhookAdapter(Protocol):
    def routes(self) -> list[Route]: ...


class HttpServer:
    def __init__(
        self,
        host: str,
        port: int,
        status: Callable[[], dict[str, str]],
        ready: Callable[[], dict[str, bool]] | None = None,
        *,
        max_connections: int = 512,
        read_timeout: float = 15.0,
    ) -> None:
        self.host, self.port = host, port
        self.max_connections, self.read_timeout = max_connections, read_timeout
        self._server: asyncio.Server | None = None
        self.status = status
        self.ready = ready
        self.started = time.monotonic()
        self.app = web.Application(client_max_size=1 << 20)  # 1 MiB bodies at most
        self.app.router.add_get("/healthz", self._health)
        self.app.router.add_get("/readyz", self._ready)
        self.app.router.add_get("/metrics", self._metrics)
        self._runner: web.AppRunner | None = None
        self.intake_open = True

    def add(self, route: Route) -> None:
        async def handler(request: web.Request) -> web.StreamResponse:
            if not self.intake_open:  # shutting down: the platform will retry
                return web.Response(status=503, text="shutting down", headers={"Retry-After": "5"})
            return await route.handler(request)

        self.app.router.add_route(route.method, route.path, handler)

    def close_intake(self) -> None:
        self.intake_open = False

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, keepalive_timeout=self.read_timeout)
        await self._runner.setup()
        assert self._runner.server is not None
        guard = _Guard(self._runner.server, self.max_connections, self.read_timeout)
        try:
            self._server = await asyncio.get_running_loop().create_server(
                guard, self.host, self.port, reuse_address=True
            )
        except OSError as exc:
            await self._runner.cleanup()
            raise HttpServerError(
                f"gateway.http: cannot listen on {self.host}:{self.port} ({exc.strerror}); "
                "set gateway.http.port to a free port"
            ) from None
        if self.port == 0:  # an ephemeral port (tests): report the real one
            self.port = self._server.sockets[0].getsockname()[1]
        logger.info("http server on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, _request: web.Request) -> web.Response:
        platforms = self.status()
        healthy = all(state == "connected" for state in platforms.values())
        body = {
            "status": "ok" if healthy else "degraded",
            "platforms": platforms,
            "uptime_s": round(time.monotonic() - self.started, 1),
        }
        return web.json_response(body, status=200 if healthy else 503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        """Prometheus text format (hermes/metrics.py)."""
        body, content_type = metrics.render()
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    async def _ready(self, _request: web.Request) -> web.Response:
        """200 only when every enabled platform is connected, state.db is writable and
        the scheduler runs (a load balancer or orchestrator sends traffic then)."""
        checks = self.ready() if self.ready is not None else {}
        ok = bool(checks) and all(checks.values()) and self.intake_open
        return web.json_response({"ready": ok, "checks": checks}, status=200 if ok else 503)


FLOOD_LOG_S = 60.0  # a refused or cut-off connection is logged at most once a minute


class _Guard:
    """aiohttp's protocol factory, bounded: see the module's docstring."""

    def __init__(self, inner: Callable[[], asyncio.Protocol], limit: int, timeout: float):
        self.inner, self.limit, self.timeout = inner, limit, timeout
        self.open = 0
        self._logged: dict[str, float] = {}

    def __call__(self) -> asyncio.Protocol:
        return _Bounded(self, self.inner())

    def log_once(self, what: str) -> None:
        now = time.monotonic()
        if now - self._logged.get(what, float("-inf")) >= FLOOD_LOG_S:
            self._logged[what] = now
            logger.warning("http: %s (logged once a minute)", what)


class _Bounded(asyncio.Protocol):
    """One connection: counted, and cut off when a request takes too long to arrive."""

    def __init__(self, guard: _Guard, inner: asyncio.Protocol) -> None:
        self.guard, self.inner = guard, inner
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.guard.open >= self.guard.limit:
            self.guard.log_once(f"over {self.guard.limit} connections: new ones are closed")
            transport.abort()
            return
        self.guard.open += 1
        self.counted = True
        self._arm()
        self.inner.connection_made(cast(asyncio.Transport, _Watched(transport, self._arm)))

    def _arm(self) -> None:
        """(Re)start the deadline: the next response must begin within the timeout."""
        if self.timer is not None:
            self.timer.cancel()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.guard.timeout, self._expired)

    def _expired(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.guard.log_once(f"a client took over {self.guard.timeout:g} s: cut off")
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.counted:
            self.guard.open -= 1
            self.counted = False
            self.inner.connection_lost(exc)


class _Watched:
    """The connection's transport as aiohttp sees it: each write (a response being
    sent) restarts the deadline; everything else is the transport itself."""

    def __init__(self, transport: asyncio.Transport, wrote: Callable[[], None]) -> None:
        self._transport, self._wrote = transport, wrote

    def write(self, data: Any) -> None:
        self._wrote()
        self._transport.write(data)

    def writelines(self, lines: Any) -> None:
        self._wrote()
        self._transport.writelines(lines)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
