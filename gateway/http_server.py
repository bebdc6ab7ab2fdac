"""The gateway's built-in HTTP server (aiohttp): health, and platform webhooks.

`GET /healthz` answers with the platforms' state and uptime (for systemd, containers
and load balancers). Adapters that receive pushes over HTTP (Telegram webhook mode)
register their routes before the server starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

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
    ) -> None:
        self.host, self.port = host, port
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
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise HttpServerError(
                f"gateway.http: cannot listen on {self.host}:{self.port} ({exc.strerror}); "
                "set gateway.http.port to a free port"
            ) from None
        if self.port == 0:  # an ephemeral port (tests): report the real one
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        logger.info("http server on %s:%d", self.host, self.port)

    async def stop(self) -> None:
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
