"""The gateway process: platform adapters, the router and the scheduler in one loop.

Start order: the http server, adapters (each on its own: one that fails to start is
retried with capped, jittered backoff while the others run; its state shows in
/healthz and `hermes gateway status`), then the scheduler. If no enabled platform has
connected within `gateway.connect_timeout_seconds`, the process stops with exit code 3
so its supervisor restarts it. Once connected, each platform's connection is checked every
SUPERVISE_S: while its SDK reconnects by itself the state says "reconnecting" (and /readyz
is 503); when the SDK has given up ("lost") the platform is stopped and restarted with the
same backoff. Stop order: the scheduler (waiting for running jobs),
stop intake and let running turns finish within a bound, then adapters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from gateway import registry
from gateway.app import App, build_app
from gateway.catch_up import CatchUp
from gateway.cluster import Cluster, platform_lease
from gateway.config import (
    ConfigError,
    HermesConfig,
    dashboard_address,
    dashboard_refusal,
    enabled_platforms,
    is_loopback,
    main_endpoint,
)
from gateway.dashboard.auth import CredentialsError
from gateway.dashboard.pages import Dashboard, Parts
from gateway.edge.http_server import HttpServer, WebhookAdapter
from gateway.edge.ports import CatchesUp, MenuEntry, PlatformAdapter, ServesOnStandby
from gateway.logs import process_name
from gateway.loopwatch import LoopWatch
from gateway.reminders import ReminderRunner
from gateway.scheduler import Scheduler
from gateway.status_file import remove_status_file, write_status_file
from gateway.uptime import UptimeLog
from hermes.backoff import Backoff
from hermes.state.db import SessionDB
from hermes.state.engine import StateDBError, explain
from hermes.state.loopguard import GUARD

logger = logging.getLogger(__name__)
RETRY_FIRST_S = 1.0
SUPERVISE_S = 2.0
EXIT_NOT_CONNECTED = 3


class Gateway:
    def __init__(
        self, home: Path, config: HermesConfig, db: SessionDB, env: Mapping[str, str] | None = None
    ) -> None:
        self.home, self.config, self.db, self.env = home, config, db, env
        damage = db.upkeep.quick_check()  # pages overwritten go unnoticed otherwise
        if damage != "ok":
            raise StateDBError(explain(db.path, Exception(damage)))
        # several gateway processes on one PostgreSQL database (gateway/cluster.py)
        self.cluster = Cluster(db, config.gateway.cluster) if db.backend == "postgresql" else None
        self.scheduler = Scheduler(
            home, config, db, leader=self.cluster.lead if self.cluster is not None else None
        )
        # each platform's state over time, for the dashboard's platform health
        self.uptime = UptimeLog(db, self.cluster.id if self.cluster is not None else process_name())
        http = config.gateway.http
        self.http = HttpServer(
            http.host,
            http.port,
            self.status,
            self.readiness,
            max_connections=http.max_connections,
            read_timeout=http.read_timeout_seconds,
        )
        self.adapters: dict[str, PlatformAdapter] = {}
        self.failed: dict[str, str] = {}
        self.retrying: dict[str, str] = {}
        self.links: dict[str, str] = {}  # a started platform's connection, when not "connected"
        self._bound: set[str] = set()  # platforms whose webhook routes the server holds
        self.standby: dict[str, str] = {}  # a leased platform another instance holds: why
        self.serving: dict[str, PlatformAdapter] = {}  # of those, the ones taking pushes here
        self.catch_up = CatchUp(db)  # what a platform that does not redeliver sent meanwhile
        self.checks = 0  # rounds of connection checks done (each every SUPERVISE_S)
        self.exit_code = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._guarding = contextlib.ExitStack()
        self.loop_watch: LoopWatch | None = None
        self.platforms = enabled_platforms(config)
        self.app: App | None = None
        if main_endpoint(config, env) is not None:
            self.app = build_app(home, config, db, env=env, runtime=self)
        elif self.platforms:
            raise ConfigError(
                "platforms are enabled but no model is configured (llm.base_url, llm.model)"
            )
        self.started_at: float | None = None
        self.started_wall: datetime | None = None  # the same moment, for gateway.json
        self._stopping = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self.reminders: ReminderRunner | None = None
        self.dashboard: Dashboard | None = None

    # -- RuntimeInfo, for /admin status ---------------------------------------------------

    def uptime_s(self) -> float | None:
        return time.monotonic() - self.started_at if self.started_at is not None else None

    def adapter_states(self) -> dict[str, str]:
        return self.status()

    async def llm_health(self) -> str:
        if self.app is None:
            return "no model configured"
        return await self.app.health()

    def dashboard_url(self) -> str | None:
        if self.dashboard is None:
            return None
        return dashboard_address(self.config, f"{self.http.host}:{self.http.port}")

    async def start(self) -> None:
        # the loop's lag measured and its stalls said with where; database work done on
        # it reported (hermes/state/loopguard.py): every chat waits while the loop does
        self.loop_watch = LoopWatch()
        self._tasks.append(asyncio.create_task(self.loop_watch.run()))
        self._guarding.enter_context(GUARD.watching(asyncio.get_running_loop()))
        problems = {  # every missing or malformed credential, found once, before anything
            name: found
            for name, section in self.platforms.items()
            if (found := registry.credential_problems(name, section, self.env))
        }
        self._refuse_unstartable(problems)
        self.started_wall = datetime.now(UTC)
        self.uptime.start()
        if self.cluster is not None:
            await self._join_cluster()
        if self.app is not None:  # settle what a crash left between stores and state.db
            memory = self.app.agent.memory
            for user_id in await asyncio.to_thread(memory.users):
                await asyncio.to_thread(memory.reconcile, user_id)
        await asyncio.to_thread(registry.preload, list(self.platforms))  # the SDKs' imports
        built = self._build_platforms(problems)
        leased = {name for name in built if self._leased(name)}
        for name, adapter in built.items():
            if isinstance(adapter, WebhookAdapter) and (routes := adapter.routes()):
                self._bound.add(name)  # a restart starts this adapter again (_retry)
                for route in routes:
                    self.http.add(route)
        if not is_loopback(self.http.host):
            logger.warning(
                "gateway.http.host is %s: /healthz and /readyz answer anyone who can reach "
                "it (webhooks still check their secret); put it behind a reverse proxy with "
                "TLS, or use 127.0.0.1",
                self.http.host,
            )
        self._mount_dashboard()
        if self.app is not None:
            await self.app.warm_models()
        await self.http.start()  # before the adapters: webhooks must find it listening
        if self.dashboard is not None:
            self.dashboard.site.set_port(self.http.port)
        await self._start_platforms(built, leased)
        await self.scheduler.start()
        deadline = self.config.gateway.connect_timeout_seconds
        if self.platforms and deadline > 0:
            self._tasks.append(asyncio.create_task(self._connect_deadline(deadline)))
        if self.app is not None:
            self._watcher = asyncio.create_task(self.app.router.watch_people())
            self.app.start_background()
            await self._start_reminders(self.app)
        if self.platforms:
            self._tasks.append(asyncio.create_task(self._supervise()))
            self._tasks.append(asyncio.create_task(self.catch_up.flushing()))
        self.started_at = time.monotonic()
        self._publish()
        logger.info("gateway started: %s", self._summary())

    def _mount_dashboard(self) -> None:
        """The operator's web dashboard under /admin/, unless config or the bind refuses
        it (a public bind needs TLS in front: `dashboard_refusal` says why)."""
        if self.app is None or not self.config.dashboard.enabled:
            return
        if (refusal := dashboard_refusal(self.config)) is not None:
            logger.warning("the dashboard is not served: %s", refusal)
            return
        app = self.app
        parts = Parts(
            self.home,
            self.config,
            self.db,
            app.people,
            app.agent.memory,
            app.embedder,
            self,
            tools_table=app.agent.tools_table,  # changed on the Tools page: live
            tool_groups=app.agent.tool_groups,
            mcp=app.agent.mcp,  # its servers' states, started on the Tools page's ask
        )
        try:
            self.dashboard = Dashboard(parts, self.http.port)
        except CredentialsError as exc:
            logger.error("the dashboard is not served: %s", exc)
            return
        for route in self.dashboard.routes():
            self.http.add(route)

    async def _start_platforms(self, built: dict[str, PlatformAdapter], leased: set[str]) -> None:
        """Each platform started (one that fails is retried); a leased one whose
        connection another instance holds waits for its lease."""
        for name, adapter in built.items():
            if name in leased and not self._hold(name):
                await self._stand_by(name, adapter)
            elif not await self._start_platform(name, adapter):
                self.retrying[name] = "retrying"
                self._tasks.append(asyncio.create_task(self._retry(name, adapter)))

    async def _start_reminders(self, app: App) -> None:
        """The reminder runner of this process, woken by the scheduler's jobs; every
        active reminder gets its exact job (one missed while down fires now, once)."""
        self.reminders = ReminderRunner(self.db, app.router, app.agent, home=str(self.home))
        self.reminders.on_scheduled = self.scheduler.schedule_reminder
        app.agent.on_reminder = self.reminders.added
        self.reminders.register()
        for reminder in await self.db.run(self.db.reminders.of_user, None):
            if reminder.status == "active" and reminder.platform in self.adapters:
                self.scheduler.schedule_reminder(reminder)

    def _refuse_unstartable(self, problems: dict[str, list[str]]) -> None:
        """Every enabled platform lacks a credential or has a malformed one: nothing can
        connect until someone fixes the env file or the config, so retrying (and being
        restarted by the supervisor, again and again) helps no one. ConfigError: the
        process exits once, naming every problem."""
        if self.platforms and len(problems) == len(self.platforms):
            listed = "; ".join(p for found in problems.values() for p in found)
            raise ConfigError(
                f"no enabled platform can start: {listed}. Fix what each says (the env "
                "file, config.yaml, or an extra to install), then start the gateway again (it "
                "is not restarted for this: exit code 2)"
            )

    def _build_platforms(self, problems: dict[str, list[str]]) -> dict[str, PlatformAdapter]:
        """Every enabled platform's adapter; what cannot be built (a missing or malformed
        credential, a missing SDK) is reported, all problems in one line, and stays off."""
        if problems:
            listed = "; ".join(p for found in problems.values() for p in found)
            logger.error("platform credentials: %s", listed)
        built: dict[str, PlatformAdapter] = {}
        for name in self.platforms:
            try:
                built[name] = self._build(name)
            except Exception as exc:
                self._failed(name, exc)
        return built

    def _build(self, name: str) -> PlatformAdapter:
        """`name`'s adapter; with several instances only the leader announces itself to
        the platform (Telegram's one setWebhook, to the load balancer's URL)."""
        announce = self.cluster is None or self.cluster.leader
        section = self.platforms[name]
        return registry.build(name, section, self.env, self._menu(), announce=announce)

    # -- several instances on one database --------------------------------------------------

    async def _join_cluster(self) -> None:
        """Register this instance, share the sessions, refuse what cannot be shared."""
        assert self.cluster is not None
        cluster = self.cluster
        cluster.info = self._instance_info
        router = self.app.router if self.app is not None else None
        if router is not None:
            router.share(self.db, cluster.id, cluster.lease_s)
            if self.app is not None and self.app.embedder is not None:
                self.app.embedder.may_run = lambda: cluster.leader  # one instance embeds
        cluster.on_beat = self._check_leases
        cluster.start(router)  # registered first: two starting at once see each other
        others = cluster.others()
        earlier = cluster.earlier()  # the instances that started before this one
        sole = self._sole()
        if earlier and (sole or any(i.info.get("sole") for i in earlier)):
            await cluster.stop()
            mine = f"platforms {', '.join(sole)} here" if sole else "a platform there"
            raise ConfigError(
                f"another gateway runs on this database ({', '.join(i.id for i in earlier)})"
                f", and {mine} connect in a mode only one process can use (polling: a "
                "second consumer of the updates ends the first one's). With several "
                "gateways use webhook mode behind a load balancer (see deploy/README, "
                "'Several gateways'), or run one gateway"
            )
        logger.info(
            "instance %s joined %d other gateway(s) on this database%s",
            cluster.id,
            len(others),
            " (the maintenance leader)" if cluster.leader else "",
        )

    def _sole(self) -> list[str]:
        """The enabled platforms only one process may connect (Telegram's polling)."""
        return [n for n, s in self.platforms.items() if registry.sharing(n, s) == "sole"]

    def _leased(self, name: str) -> bool:
        return self.cluster is not None and registry.sharing(name, self.platforms[name]) == "leased"

    def _hold(self, name: str) -> bool:
        """Take (or keep) `name`'s connection lease; False: another instance holds it."""
        assert self.cluster is not None
        if self.cluster.hold(platform_lease(name)):
            self.standby.pop(name, None)
            return True
        holder = self.cluster.holder(platform_lease(name)) or "another instance"
        pushed = "; what is pushed here is taken" if name in self.serving else ""
        self.standby[name] = f"standby: the connection is held by {holder}{pushed}"
        return False

    async def _stand_by(self, name: str, adapter: PlatformAdapter) -> None:
        """Another instance holds `name`'s connection: take what is pushed here meanwhile
        (when the platform can: ServesOnStandby), and wait for the lease."""
        if isinstance(adapter, ServesOnStandby):
            assert self.app is not None
            self.app.router.attach(adapter)
            try:
                await adapter.serve(self.app.router.handle)
                self.serving[name] = adapter
                said = self.standby.get(name, "standby: the connection is held elsewhere")
                self.standby[name] = f"{said}; what is pushed here is taken"
            except Exception as exc:  # the connection's holder answers what it can
                logger.warning("platform %s cannot take pushed requests here: %r", name, exc)
                self.app.router.detach(name)
        self._tasks.append(asyncio.create_task(self._wait_for_lease(name, adapter)))

    async def _wait_for_lease(self, name: str, adapter: PlatformAdapter) -> None:
        """A leased platform held elsewhere: try for its lease every third of the lease
        time; once it is ours (its holder died or stopped), connect."""
        assert self.cluster is not None
        every = self.cluster.lease_s / 3
        while not self._stopping.is_set():
            if self.started_at is not None:
                self._publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), every)
                return
            if await asyncio.to_thread(self._hold, name):
                logger.info("platform %s: its connection lease is ours; connecting", name)
                if not await self._start_platform(name, adapter):
                    self.retrying[name] = "retrying"
                    await self._retry(name, adapter)
                return

    async def _check_leases(self, held: set[str]) -> None:
        """After each heartbeat: a leased platform whose lease was lost (this process
        stalled past the lease time, another instance took it) disconnects at once."""
        for name, adapter in list(self.adapters.items()):
            if not self._leased(name) or platform_lease(name) in held:
                continue
            logger.error("platform %s: its connection lease was lost; disconnecting", name)
            self.adapters.pop(name, None)
            self.links.pop(name, None)
            assert self.app is not None
            self.app.router.detach(name)
            if self.app.router.shared is not None:
                await self.app.router.shared.hand_back(name)
            with contextlib.suppress(Exception):
                await adapter.stop()
            # a webhook's routes are bound to the adapter they were made by: it stays
            await self._stand_by(name, adapter if name in self._bound else self._build(name))
            self._publish()

    def _instance_info(self) -> dict[str, object]:
        """What `hermes gateway status` and `/admin status` show of this instance."""
        shared = self.app.router.shared if self.app is not None else None
        return {
            "http": f"{self.http.host}:{self.http.port}",
            "platforms": self.status(),
            "leader": self.cluster.leader if self.cluster is not None else False,
            "taken_over": shared.taken_over if shared is not None else 0,
            "sole": self._sole(),
        }

    async def _start_platform(self, name: str, adapter: PlatformAdapter) -> bool:
        """Attach, then start: events may arrive before start() returns (Discord syncs
        its commands after connecting), and the router must know the adapter by then."""
        assert self.app is not None  # platforms need a model (checked in __init__)
        router = self.app.router
        logger.debug("starting platform %s", name)
        router.attach(adapter)
        self.serving.pop(name, None)  # start() adds the connection to what serve() did
        catches_up = isinstance(adapter, CatchesUp)
        if catches_up:  # what arrives during the start waits behind what was missed
            self.catch_up.hold(name)
        try:
            sink = self.catch_up.sink(name, router.handle) if catches_up else router.handle
            await adapter.start(sink)
        except Exception as exc:  # one platform failing must not take the others down
            if catches_up:
                await self.catch_up.release(name, router.handle, keep=False)
            router.detach(name)
            self._failed(name, exc)
            with contextlib.suppress(Exception):  # free what a half start opened
                await adapter.stop()
            return False
        self.failed.pop(name, None)
        self.retrying.pop(name, None)
        self.links.pop(name, None)
        self.adapters[name] = adapter
        logger.info("platform %s connected", name)
        if isinstance(adapter, CatchesUp):
            self._tasks.append(asyncio.create_task(self.catch_up.catch_up(adapter, router.handle)))
        self._publish()
        return True

    async def _retry(self, name: str, adapter: PlatformAdapter) -> None:
        """Start `name` again and again, 1 s, 2 s, 4 s... apart (at most
        `gateway.retry_max_seconds`, with jitter so restarts do not march in step)."""
        waits = Backoff(RETRY_FIRST_S, self.config.gateway.retry_max_seconds)  # cap >= 1 s
        while not self._stopping.is_set():
            wait = waits.next()
            self.retrying[name] = f"retrying in {wait:.0f} s"
            logger.warning("platform %s: retrying in %.1f s", name, wait)
            if self.started_at is not None:  # keep `hermes gateway status` current
                self._publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait)
                return  # stopping
            if name not in self._bound:  # a fresh one (a webhook's routes are bound to it)
                adapter = self._build(name)
            if await self._start_platform(name, adapter):
                return

    async def _supervise(self) -> None:
        """Every SUPERVISE_S, ask each started platform how its connection is."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), SUPERVISE_S)
                return
            for name, adapter in list(self.adapters.items()):
                try:
                    state = await asyncio.wait_for(adapter.connection(), SUPERVISE_S)
                except Exception as exc:
                    state = f"reconnecting: the connection check failed ({exc!r})"
                if state != self.links.get(name, "connected"):
                    await self._changed(name, adapter, state)
            self.checks += 1

    async def _changed(self, name: str, adapter: PlatformAdapter, state: str) -> None:
        if state == "connected":
            self.links.pop(name, None)
            logger.info("platform %s connected again", name)
            if isinstance(adapter, CatchesUp) and self.app is not None:  # a new session
                handle = self.app.router.handle
                self._tasks.append(asyncio.create_task(self.catch_up.catch_up(adapter, handle)))
        elif not state.startswith("lost"):
            self.links[name] = state
            logger.warning("platform %s: %s", name, state)
        else:
            logger.error("platform %s %s; restarting it", name, state.replace(":", " ", 1))
            self.links.pop(name, None)
            self.adapters.pop(name, None)
            assert self.app is not None
            self.app.router.detach(name)
            with contextlib.suppress(Exception):
                await adapter.stop()
            self.failed[name] = state.split(": ", 1)[-1]
            self.retrying[name] = "retrying"
            self._tasks.append(asyncio.create_task(self._retry(name, adapter)))
        self._publish()

    def _publish(self) -> None:
        """What `hermes gateway status` reads: the platforms now, since the start (with
        several instances, each one's row in the database, renewed with its heartbeat);
        and the platforms' states over time (the dashboard's platform health)."""
        self.uptime.note(self.status())
        if self.cluster is not None:
            self.cluster.publish()
            return
        if self.started_wall is None:
            return
        where = f"{self.http.host}:{self.http.port}"
        write_status_file(self.home, self.status(), where, started_at=self.started_wall)

    def _summary(self) -> str:
        """The platforms as the start line says them: connected, retrying, off."""
        if not self.platforms:
            return "no platforms enabled"
        connected = ", ".join(self.adapters) or "none"
        parts = [f"connected: {connected}"]
        if waiting := [name for name in self.platforms if name in self.retrying]:
            parts.append(f"retrying: {', '.join(waiting)}")
        if standby := [n for n in self.platforms if n in self.standby]:
            parts.append(f"standby (held by another instance): {', '.join(standby)}")
        if off := [
            n
            for n in self.platforms
            if n not in self.adapters and n not in waiting and n not in self.standby
        ]:
            parts.append(f"off: {', '.join(off)}")
        return "; ".join(parts)

    def _menu(self) -> list[MenuEntry]:
        return self.app.commands.menu() if self.app is not None else []

    async def _connect_deadline(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
            return
        if not self.adapters:
            logger.error(
                "no platform connected within %g s (gateway.connect_timeout_seconds): "
                "exiting so the supervisor restarts the gateway",
                seconds,
            )
            self.exit_code = EXIT_NOT_CONNECTED
            self.request_stop()

    def _failed(self, name: str, exc: Exception) -> None:
        logger.error("platform %s failed to start: %s: %s", name, type(exc).__name__, exc)
        self.failed[name] = f"{type(exc).__name__}: {exc}"

    def status(self) -> dict[str, str]:
        states = {name: self.links.get(name, "connected") for name in self.adapters}
        states.update({n: why for n, why in self.standby.items() if n not in self.adapters})
        for name, why in self.failed.items():
            retry = self.retrying.get(name)
            states[name] = f"failed: {why}" + (f" ({retry})" if retry else "")
        for name in self.platforms:  # before its start, or between a stop and its restart
            states.setdefault(name, "starting")
        return states

    def readiness(self) -> dict[str, bool]:
        """What /readyz requires: every enabled platform connected, state.db writable,
        the scheduler running."""
        checks = {  # (a platform whose one connection another instance holds is fine)
            f"platform {name}": (name in self.adapters and name not in self.links)
            or (name in self.standby and name not in self.failed)
            for name in self.platforms
        }
        checks["state.db writable"] = self.db.upkeep.writable()
        checks["scheduler running"] = self.scheduler.running
        return checks

    async def stop(self) -> None:
        """Stop intake (what is not received stays with the platforms), the scheduler,
        then let running and queued turns finish within `gateway.stop_grace_seconds` (with
        several gateways what waits is handed on first: only running turns end here), the
        cluster part hands back what is left, then disconnect."""
        self.http.close_intake()
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        if self._watcher is not None:
            self._watcher.cancel()
        for name, adapter in list(self.adapters.items()):
            try:
                await adapter.stop_intake()
            except Exception:
                logger.exception("platform %s did not stop receiving cleanly", name)
        await self.scheduler.stop()
        if self.reminders is not None:
            self.reminders.unregister()
        if self.app is not None:
            await self.app.router.stop(self.config.gateway.stop_grace_seconds)
        if self.cluster is not None:  # what was taken and not worked goes back, leases freed
            await self.cluster.stop()
        for name, adapter in [*self.adapters.items(), *self.serving.items()]:
            try:
                await adapter.stop()
            except Exception:
                logger.exception("platform %s did not stop cleanly", name)
        await self.uptime.close()
        await self.catch_up.flush()  # the next start catches up from here
        await self.http.stop()
        if self.app is not None:
            await self.app.close()
        remove_status_file(self.home)
        self._guarding.close()
        logger.info("gateway stopped")

    def request_stop(self) -> None:
        self._stopping.set()

    async def serve(self) -> int:
        """Run until SIGTERM or SIGINT (or the connect deadline), then shut down cleanly;
        the process's exit code."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        await self.start()
        try:
            await self._stopping.wait()
        finally:
            await self.stop()
        return self.exit_code
