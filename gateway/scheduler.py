"""APScheduler (3.x, AsyncIOScheduler) inside the gateway process.

The timers live in memory (APScheduler's memory job store): its SQL job store would
read and write state.db on the event loop at every run, and APScheduler 3 must not share
one between schedulers. What a restart keeps is in state.db, read and written on the
database executor: each job's last run (`job_runs`) and when it was first scheduled
(`job_schedules`), so each start schedules a job an interval after its last run, or,
never run, after its first schedule (a gateway restarted more often than a job's
interval still runs it); an interval changed in config applies from the last run.
Reminders are scheduled again at every start from their table.

With several gateways on one PostgreSQL database the database decides who runs: a
maintenance job (consolidation, idle sessions, held memory
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
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.asyncio import AsyncIOExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger
from apscheduler.util import ref_to_obj

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
PAUSED = "skipped: paused"
ASKED_POLL_S = 5.0  # a run asked for from the dashboard or the CLI starts this soon
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
    controlled: bool = True  # an operator may pause it and ask for a run
    paused_at: datetime | None = None
    paused_by: str = ""
    run_asked_at: datetime | None = None
    run_asked_by: str = ""


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
        asked_poll_s: float = ASKED_POLL_S,
    ) -> None:
        """`leader`: with several gateways on one database, whether this one is the
        maintenance leader now (asked when a job is due); `asked_poll_s`: how often the
        runs asked for are looked for."""
        self.home, self.db = home, db
        self.specs = job_specs(config)
        self._leader = leader or (lambda: True)
        self._executor = _Executor()
        self._scheduler = AsyncIOScheduler(
            jobstores={"default": MemoryJobStore()},
            executors={"default": self._executor},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 3600},
            timezone="UTC",
        )
        self._scheduler.add_listener(self._on_result, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        self._recording: set[asyncio.Future[None]] = set()
        self._watching: asyncio.Task[None] | None = None
        self._asked_poll_s = asked_poll_s
        self.polls = 0  # looks for asked runs done (each ASKED_POLL_S)
        # each running job's start (wall clock, monotonic) and who asked for the run
        self._started: dict[str, tuple[datetime, float, str]] = {}
        self.instance = logs.process_name()

    async def start(self) -> None:
        """Start inside the running event loop: each job's timer in memory, its first
        run an interval after its last recorded one (at once when overdue or asked for),
        or, never run, an interval after it was first scheduled (at once for the jobs
        run at the first start). The database is read and written on its executor."""
        times = await self.db.run(self.db.jobs.schedule_jobs, [s.id for s in self.specs])
        self._scheduler.start(paused=True)
        now = datetime.now(UTC)
        since = {job_id: row.since for job_id, row in times.schedules.items()}
        for spec in self.specs:
            asked = (row := times.schedules.get(spec.id)) is not None and row.run_asked_at
            first = now if asked else _first_run(spec, times.runs, since, now)
            self._scheduler.add_job(
                self._turn(spec),
                IntervalTrigger(seconds=spec.every.total_seconds(), timezone="UTC"),
                id=spec.id,
                next_run_time=max(now, first),
            )
        self._scheduler.resume()
        self._watching = asyncio.create_task(self._watch_asked(), name="scheduler-asked")

    def _turn(self, spec: JobSpec) -> Callable[[], Awaitable[str]]:
        """`spec`'s job, run here only when it is this instance's turn and it is not
        paused; its start, length and who asked for it kept for its record."""
        func = ref_to_obj(spec.func)
        controlled = spec.id not in EVERY_INSTANCE

        async def run() -> str:
            asked_by = ""
            if controlled:
                verdict, asked_by = await asyncio.to_thread(self._due, spec)
                if verdict:
                    return verdict
            self._started[spec.id] = (datetime.now(UTC), time.monotonic(), asked_by)
            result: str = await func(home=str(self.home))
            return result

        return run

    def _due(self, spec: JobSpec) -> tuple[str, str]:
        """Whether `spec` runs now ("" to run, else why it is skipped) and who asked for
        this run: not while paused; with several gateways, on the leader alone; asked
        for, at once; else once the last run is about an interval old (a leader that
        died mid-interval is followed by one run, later)."""
        control = self.db.jobs.job_schedules().get(spec.id)
        if control is not None and control.paused_at is not None:
            return PAUSED, ""
        if not self._leader():
            return SKIPPED, ""
        if control is not None and control.run_asked_at is not None:
            return "", control.run_asked_by or "someone"
        last = self.db.jobs.job_runs().get(spec.id)
        if last is None or (
            datetime.now(UTC) - as_utc(last.last_run_at) >= spec.every * DUE_FRACTION
        ):
            return "", ""
        return SKIPPED, ""

    async def _watch_asked(self) -> None:
        """Every ASKED_POLL_S: a run an operator asked for (on any gateway of the
        database, or the CLI) is started here if it is this instance's turn."""
        while True:
            await asyncio.sleep(self._asked_poll_s)
            try:
                due = await asyncio.to_thread(self._asked_here)
            except Exception as exc:  # the database, for now: the next poll tries again
                logger.warning("could not read the runs asked for: %s", exc)
                continue
            now = datetime.now(UTC)
            for job_id in due:
                job = self._scheduler.get_job(job_id)
                if job is not None and job_id not in self._started:
                    job.modify(next_run_time=now)
            self.polls += 1

    def _asked_here(self) -> list[str]:
        controls = self.db.jobs.job_schedules()
        asked = [
            spec.id
            for spec in self.specs
            if spec.id not in EVERY_INSTANCE
            and (row := controls.get(spec.id)) is not None
            and row.run_asked_at is not None
            and row.paused_at is None
        ]
        return asked if asked and self._leader() else []

    async def stop(self) -> None:
        """Stop taking new runs and wait for the running ones (STOP_WAIT_S at most)."""
        if self._watching is not None:
            self._watching.cancel()
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

    def next_run(self, job_id: str) -> datetime | None:
        """When the job `job_id` (a reminder's: "reminder:<id>") runs next here."""
        job = self._scheduler.get_job(job_id)
        return None if job is None else job.next_run_time

    def schedule_reminder(self, reminder: Reminder) -> None:
        """Wake up exactly when `reminder` is due (every start schedules the active
        reminders again: a run missed while down fires once, late, at the next start)."""
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
        started = self._started.pop(event.job_id, None)
        if ok and event.retval in (SKIPPED, PAUSED):  # not run here: nothing to record
            return
        summary = (
            str(event.retval) if ok else f"{type(event.exception).__name__}: {event.exception}"
        )
        at, clock, asked_by = started or (datetime.now(UTC), time.monotonic(), "")
        # told on the loop: recorded on the database executor (a stop waits for it)
        recording = asyncio.ensure_future(
            self.db.run(
                functools.partial(
                    self.db.jobs.record_run,
                    event.job_id,
                    ok,
                    summary,
                    started_at=at,
                    seconds=time.monotonic() - clock,
                    instance=self.instance,
                    asked_by=asked_by,
                )
            )
        )
        self._recording.add(recording)
        recording.add_done_callback(self._recorded)

    def _recorded(self, recording: asyncio.Future[None]) -> None:
        self._recording.discard(recording)
        if not recording.cancelled() and (problem := recording.exception()) is not None:
            logger.error("a job's run could not be recorded: %s", problem)


def read_status(home: Path, config: HermesConfig, db: SessionDB) -> list[JobStatus]:
    """Job status from state.db, without running a scheduler (for the CLI): the next
    run an interval after the last recorded one, or, never run, after the job was first
    scheduled (None: no gateway has scheduled it yet)."""
    return describe([], db, job_specs(config))


def _first_run(
    spec: JobSpec, runs: dict[str, JobRun], since: dict[str, datetime], now: datetime
) -> datetime:
    """When `spec` is next due, from its last run or its first schedule (`now` when
    neither is known: a job run at the first start)."""
    if (last := runs.get(spec.id)) is not None:
        return as_utc(last.last_run_at) + spec.every
    first = as_utc(since[spec.id]) if spec.id in since else now
    return first if spec.id in RUN_AT_ONCE else first + spec.every


def describe(jobs: list[Any], db: SessionDB, specs: list[JobSpec]) -> list[JobStatus]:
    """`jobs`: a running scheduler's timers (their next run); without one, the next
    run is worked out from the last run or the first schedule."""
    runs, schedules = db.jobs.job_runs(), db.jobs.job_schedules()
    since = {job_id: row.since for job_id, row in schedules.items()}
    by_id = {job.id: job for job in jobs}
    statuses = []
    now = datetime.now(UTC)
    for spec in specs:
        job = by_id.get(spec.id)
        run = runs.get(spec.id)
        control = schedules.get(spec.id)
        if job is not None:
            next_run = job.next_run_time
        elif run is None and spec.id not in since:
            next_run = None
        else:
            next_run = max(now, _first_run(spec, runs, since, now))
        statuses.append(
            JobStatus(
                spec.id,
                spec.every,
                next_run,
                run.last_run_at if run else None,
                run.ok if run else None,
                run.summary if run else "",
                controlled=spec.id not in EVERY_INSTANCE,
                paused_at=control.paused_at if control else None,
                paused_by=control.paused_by if control else "",
                run_asked_at=control.run_asked_at if control else None,
                run_asked_by=control.run_asked_by if control else "",
            )
        )
    return statuses


def control(db: SessionDB, config: HermesConfig, job_id: str, what: str, by: str) -> str:
    """An operator's `what` (pause, resume, run) on `job_id`, from the dashboard or the
    CLI: what became of it, in words. ValueError for a job or a control that is not."""
    ids = [spec.id for spec in job_specs(config)]
    if job_id not in ids:
        raise ValueError(f"there is no job {job_id!r} (jobs: {', '.join(ids)})")
    if job_id in EVERY_INSTANCE:
        raise ValueError(
            f"{job_id} runs on every gateway, every {REMINDER_SWEEP_S:.0f} s, and cannot be "
            "paused or run by hand (a reminder is cancelled on its own)"
        )
    if what == "pause":
        if db.jobs.pause(job_id, by):
            return f"{job_id} paused: its runs are skipped until resumed"
        return f"{job_id} was already paused"
    if what == "resume":
        if db.jobs.resume(job_id):
            return f"{job_id} resumed: it runs on its schedule"
        return f"{job_id} was not paused"
    if what == "run":
        paused = (row := db.jobs.job_schedules().get(job_id)) is not None and row.paused_at
        when = (
            "once resumed"
            if paused
            else f"within {ASKED_POLL_S:.0f} s on the gateway whose turn it is"
        )
        asked = "asked" if db.jobs.ask_run(job_id, by) else "was already asked"
        return f"{job_id} {asked} to run: it starts {when}"
    raise ValueError(f"there is no control {what!r} (pause, resume, run)")
