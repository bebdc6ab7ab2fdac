"""APScheduler (3.x, AsyncIOScheduler) inside the gateway process.

On SQLite (one gateway per home) its jobs live in state.db: jobs are added only when
missing from the job store, so a restart keeps their schedule; an interval changed in
config reschedules the job.

On PostgreSQL several gateways may share the database, and APScheduler 3 must not share
a job store between schedulers: each process keeps its own timers in memory and the
database decides who runs. A maintenance job (consolidation, idle sessions, held memory
writes, the daily upkeep) runs only on the instance that holds the leader lease
(`leader`), and only when the last recorded run is at least ~an interval old, so a
leader that died mid-interval is followed by one run, later, not two; each start
schedules a job from its last recorded run. The reminder sweep runs on every instance
(each due run is claimed once in the database: hermes/state/reminders.py).

Every run's result is recorded in state.db for `hermes scheduler status` and `/admin
status`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.asyncio import AsyncIOExecutor
from apscheduler.jobstores.base import BaseJobStore, ConflictingIdError
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger
from apscheduler.util import ref_to_obj, undefined

from gateway import logs
from gateway.config import HermesConfig
from hermes.state.db import SessionDB
from hermes.state.models import JobRun, Reminder, as_utc

logger = logging.getLogger(__name__)

REMINDER_JOB = "reminder:"
REMINDER_SWEEP_S = 30.0  # reminders made by another process are found this often
RUN_AT_ONCE = ("consolidation_check", "reminders")  # first run at the first start
EVERY_INSTANCE = ("reminders",)  # run on every gateway of a shared database
DUE_FRACTION = 0.9  # a leader's run waits until the last one is this much of an interval old
SKIPPED = "skipped: not this instance's turn"
STOP_WAIT_S = 10.0  # a job still running at a stop is given this long to finish


class _Executor(AsyncIOExecutor):  # type: ignore[misc]
    """APScheduler's asyncio executor, whose shutdown cancels the running jobs whatever
    `wait` says (a consolidation cut mid-write, a traceback in the log at every stop
    that met one): `drain` lets them finish first."""

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        """Each run logged under its job's id: the task is made here and keeps the
        context it is made in (else a wake-up set during a turn logs under that turn)."""
        with logs.turn(job.id if job.id.startswith(REMINDER_JOB) else f"job:{job.id}"):
            super()._do_submit_job(job, run_times)

    async def drain(self, timeout: float) -> None:
        running = [f for f in self._pending_futures if not f.done()]
        if running:
            _, late = await asyncio.wait(running, timeout=timeout)
            if late:
                logger.warning(
                    "%d scheduled job(s) still running at the stop: cancelled", len(late)
                )


@dataclass(frozen=True, slots=True)
class JobSpec:
    id: str
    func: str  # "module:function", stored by reference
    every: timedelta


@dataclass(frozen=True, slots=True)
class JobStatus:
    id: str
    every: timedelta
    next_run: datetime | None
    last_run: datetime | None
    last_ok: bool | None
    last_result: str


def job_specs(config: HermesConfig) -> list[JobSpec]:
    return [
        JobSpec(
            "consolidation_check",
            "gateway.jobs:consolidation_check",
            timedelta(minutes=config.memory.consolidation.check_interval_minutes),
        ),
        JobSpec("idle_sessions", "gateway.jobs:idle_sessions", timedelta(minutes=5)),
        # memory writes held while the guard's model could not answer
        JobSpec("memory_pending", "gateway.jobs:memory_pending", timedelta(minutes=2)),
        JobSpec("maintenance", "gateway.jobs:maintenance", timedelta(days=1)),
        # reminders made by another process (or a wake-up lost): exact ones have own jobs
        JobSpec("reminders", "gateway.reminders:sweep_job", timedelta(seconds=REMINDER_SWEEP_S)),
    ]


class Scheduler:
    def __init__(
        self,
        home: Path,
        config: HermesConfig,
        db: SessionDB,
        *,
        leader: Callable[[], bool] | None = None,
    ) -> None:
        """`leader`: with several gateways on one database, whether this one is the
        maintenance leader now (asked when a job is due)."""
        self.home, self.db = home, db
        self.specs = job_specs(config)
        self.shared = db.backend == "postgresql"
        self._leader = leader or (lambda: True)
        self._store: BaseJobStore = (
            MemoryJobStore() if self.shared else SQLAlchemyJobStore(engine=db.engine)
        )
        self._executor = _Executor()
        self._scheduler = AsyncIOScheduler(
            jobstores={"default": self._store},
            executors={"default": self._executor},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 3600},
            timezone="UTC",
        )
        self._scheduler.add_listener(self._on_result, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        self._recording: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        """Start inside the running event loop; existing schedules are kept."""
        if self.shared:
            self._start_shared(await self.db.run(self.db.upkeep.job_runs))
            return
        # create the job table under our write lock: several processes may start at once
        store = self._store
        assert isinstance(store, SQLAlchemyJobStore)
        await self.db.run(
            self.db.upkeep.run_ddl, lambda conn: store.jobs_t.create(conn, checkfirst=True)
        )
        self._scheduler.start(paused=True)
        for spec in self.specs:
            trigger = IntervalTrigger(seconds=spec.every.total_seconds(), timezone="UTC")
            job = self._scheduler.get_job(spec.id)
            if job is None:  # first start: check memory right away, the rest on schedule
                first = datetime.now(UTC) if spec.id in RUN_AT_ONCE else undefined
                with contextlib.suppress(ConflictingIdError):  # another gateway added it
                    self._scheduler.add_job(
                        spec.func,
                        trigger,
                        id=spec.id,
                        kwargs={"home": str(self.home)},
                        next_run_time=first,
                    )
            elif getattr(job.trigger, "interval", None) != spec.every:
                job.reschedule(trigger)
        self._scheduler.resume()

    def _start_shared(self, runs: dict[str, JobRun]) -> None:
        """Each job's timer in memory, its first run an interval after its last recorded
        one (at once when overdue, or never run and run at the first start)."""
        self._scheduler.start(paused=True)
        now = datetime.now(UTC)
        for spec in self.specs:
            last = runs.get(spec.id)
            if last is not None:
                first = max(now, as_utc(last.last_run_at) + spec.every)
            else:
                first = now if spec.id in RUN_AT_ONCE else now + spec.every
            self._scheduler.add_job(
                self._turn(spec),
                IntervalTrigger(seconds=spec.every.total_seconds(), timezone="UTC"),
                id=spec.id,
                next_run_time=first,
            )
        self._scheduler.resume()

    def _turn(self, spec: JobSpec) -> Callable[[], Awaitable[str]]:
        """`spec`'s job, run here only when it is this instance's turn."""
        func = ref_to_obj(spec.func)
        everyone = spec.id in EVERY_INSTANCE

        async def run() -> str:
            if not everyone and not await asyncio.to_thread(self._due, spec):
                return SKIPPED
            result: str = await func(home=str(self.home))
            return result

        return run

    def _due(self, spec: JobSpec) -> bool:
        if not self._leader():
            return False
        last = self.db.upkeep.job_runs().get(spec.id)
        return last is None or (
            datetime.now(UTC) - as_utc(last.last_run_at) >= spec.every * DUE_FRACTION
        )

    async def stop(self) -> None:
        """Stop taking new runs and wait for the running ones (STOP_WAIT_S at most)."""
        if self._scheduler.running:
            self._scheduler.pause()
            await self._executor.drain(STOP_WAIT_S)
            self._scheduler.shutdown(wait=False)
        if self._recording:
            await asyncio.wait(set(self._recording), timeout=STOP_WAIT_S)

    @property
    def running(self) -> bool:
        return bool(self._scheduler.running)

    def status(self) -> list[JobStatus]:
        return describe(self._scheduler.get_jobs(), self.db, self.specs)

    def schedule_reminder(self, reminder: Reminder) -> None:
        """Wake up exactly when `reminder` is due (a job in the same store: a restart
        keeps it; a run missed while down fires once, late, at the next start)."""
        if not self._scheduler.running or reminder.due_at is None:
            return
        when = reminder.retry_at or reminder.due_at
        self._scheduler.add_job(
            "gateway.reminders:fire_job",
            DateTrigger(run_date=as_utc(when)),
            id=f"{REMINDER_JOB}{reminder.id}",
            kwargs={"home": str(self.home), "reminder_id": reminder.id},
            replace_existing=True,
            misfire_grace_time=None,  # however late: once (the runner marks it late)
        )

    def _on_result(self, event: JobExecutionEvent) -> None:
        if event.job_id.startswith(REMINDER_JOB):  # recorded on the reminder's own runs
            return
        ok = event.exception is None
        if ok and event.retval == SKIPPED:  # another instance's turn: nothing ran
            return
        summary = (
            str(event.retval) if ok else f"{type(event.exception).__name__}: {event.exception}"
        )
        # told on the loop: recorded on the database executor (a stop waits for it)
        recording = asyncio.ensure_future(
            self.db.run(self.db.upkeep.record_job_run, event.job_id, ok, summary)
        )
        self._recording.add(recording)
        recording.add_done_callback(self._recorded)

    def _recorded(self, recording: asyncio.Future[None]) -> None:
        self._recording.discard(recording)
        if not recording.cancelled() and (problem := recording.exception()) is not None:
            logger.error("a job's run could not be recorded: %s", problem)


def read_status(home: Path, config: HermesConfig, db: SessionDB) -> list[JobStatus]:
    """Job status from state.db, without running a scheduler (for the CLI). With
    PostgreSQL the timers live in the gateways: the next run is an interval after the
    last recorded one."""
    if db.backend == "postgresql":
        ttl = config.gateway.cluster.lease_seconds
        started = [i.started_at for i in db.cluster.instances(ttl) if i.alive]
        return describe([], db, job_specs(config), from_last_run=True, started=started)
    store = SQLAlchemyJobStore(engine=db.engine)
    store.start(AsyncIOScheduler(timezone="UTC"), "default")
    jobs = store.get_all_jobs()
    return describe(jobs, db, job_specs(config))


def _next_fire(started: datetime, spec: JobSpec, now: datetime) -> datetime:
    """When a gateway started at `started` next fires `spec` (its first run an interval
    after the start, at the start for the jobs run at once), not before `now`."""
    if spec.id in RUN_AT_ONCE and started >= now - spec.every:
        return started
    periods = max(1, -(-(now - started) // spec.every))
    return started + periods * spec.every


def describe(
    jobs: list[Any],
    db: SessionDB,
    specs: list[JobSpec],
    *,
    from_last_run: bool = False,
    started: Sequence[datetime] = (),
) -> list[JobStatus]:
    """`started`: when the live gateways started (PostgreSQL: each runs its own timers,
    a job never run is first due an interval after a gateway's start)."""
    runs = db.upkeep.job_runs()
    by_id = {job.id: job for job in jobs}
    statuses = []
    now = datetime.now(UTC)
    for spec in specs:
        job = by_id.get(spec.id)
        run = runs.get(spec.id)
        next_run = job.next_run_time if job else None
        if from_last_run and run is not None:
            next_run = as_utc(run.last_run_at) + spec.every
        elif from_last_run and started:
            next_run = min(_next_fire(as_utc(at), spec, now) for at in started)
        statuses.append(
            JobStatus(
                spec.id,
                spec.every,
                next_run,
                run.last_run_at if run else None,
                run.ok if run else None,
                run.summary if run else "",
            )
        )
    return statuses
