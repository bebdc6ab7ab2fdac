"""The scheduler's record in state.db: each job's last run (`job_runs`), when it was first
scheduled and an operator's controls (`job_schedules`: paused, a run asked for), and the
history of its runs (`job_history`, the last HISTORY_KEPT of each job). Read and written
by gateway/scheduler.py on the database executor, by the dashboard and the CLI."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, text, update
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import JobHistory, JobRun, JobSchedule, utcnow

HISTORY_KEPT = 500  # runs of each job (a job every 30 s: its last four hours)
SUMMARY_CHARS = 500

_SCHEDULE_JOB = text(
    "INSERT INTO job_schedules (job_id, since, paused_by, run_asked_by) "
    "VALUES (:job, :now, '', '') ON CONFLICT DO NOTHING"
)


@dataclass(frozen=True, slots=True)
class JobTimes:
    runs: dict[str, JobRun]  # each job's last run
    schedules: dict[str, JobSchedule]  # when each job was first scheduled, its controls


class JobsDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    def schedule_jobs(self, job_ids: Iterable[str]) -> JobTimes:
        """A starting scheduler's view: each job's last run, and when it was first
        scheduled (now, for the jobs no gateway scheduled before: the first start's
        time is kept, so a gateway restarted more often than a job's interval still
        runs it an interval after that)."""
        now = eng.sql_time(utcnow())

        def work(session: Session) -> JobTimes:
            for job_id in job_ids:
                session.execute(_SCHEDULE_JOB, {"job": job_id, "now": now})
            return JobTimes(_runs(session), _schedules(session))

        return eng.with_retry(self.engine, work, self.patience, keys=())

    def job_runs(self) -> dict[str, JobRun]:
        with eng.reading(self.engine) as session:
            return _runs(session)

    def job_schedules(self) -> dict[str, JobSchedule]:
        """Each job's first schedule and controls (hermes/state/models.py `JobSchedule`)."""
        with eng.reading(self.engine) as session:
            return _schedules(session)

    def record_run(
        self,
        job_id: str,
        ok: bool,
        summary: str,
        *,
        started_at: datetime | None = None,
        seconds: float = 0.0,
        instance: str = "",
        asked_by: str = "",
    ) -> None:
        """One run's result: the job's last run, a line of its history (the oldest
        beyond HISTORY_KEPT dropped), and the run asked for answered (unless asked again
        after this run started)."""
        started = started_at or utcnow()
        summary = summary[:SUMMARY_CHARS]

        def work(session: Session) -> None:
            session.merge(JobRun(job_id=job_id, last_run_at=utcnow(), ok=ok, summary=summary))
            session.add(
                JobHistory(
                    job_id=job_id,
                    started_at=started,
                    seconds=round(seconds, 3),
                    ok=ok,
                    summary=summary,
                    instance=instance,
                    asked_by=asked_by,
                )
            )
            session.flush()
            oldest_kept = session.exec(
                select(JobHistory.id)
                .where(col(JobHistory.job_id) == job_id)
                .order_by(col(JobHistory.id).desc())
                .offset(HISTORY_KEPT - 1)
                .limit(1)
            ).first()
            if oldest_kept is not None:
                session.execute(
                    delete(JobHistory).where(
                        col(JobHistory.job_id) == job_id, col(JobHistory.id) < oldest_kept
                    )
                )
            session.execute(
                update(JobSchedule)
                .where(
                    col(JobSchedule.job_id) == job_id,
                    col(JobSchedule.run_asked_at).is_not(None),
                    col(JobSchedule.run_asked_at) <= started,
                )
                .values(run_asked_at=None, run_asked_by="")
            )

        eng.with_retry(self.engine, work, self.patience, keys=(f"job:{job_id}",))

    def pause(self, job_id: str, by: str) -> bool:
        """Pause `job_id` (its runs are skipped until resumed); False if it already was."""
        return self._control(job_id, paused_at=utcnow(), paused_by=by)

    def resume(self, job_id: str) -> bool:
        """Let `job_id` run again on its schedule; False if it was not paused."""
        return self._control(job_id, paused_at=None, paused_by="")

    def ask_run(self, job_id: str, by: str) -> bool:
        """Ask for one run of `job_id` now, whatever its schedule (by whichever gateway's
        turn it is, within seconds); False if a run was already asked for."""
        return self._control(job_id, run_asked_at=utcnow(), run_asked_by=by)

    def _control(self, job_id: str, **values: object) -> bool:
        field = next(iter(values))

        def work(session: Session) -> bool:
            row = session.get(JobSchedule, job_id)
            if row is None:
                row = JobSchedule(job_id=job_id)
            if (getattr(row, field) is None) == (values[field] is None):
                return False  # already so (a second click, another operator)
            for name, value in values.items():
                setattr(row, name, value)
            session.add(row)
            return True

        return eng.with_retry(self.engine, work, self.patience, keys=(f"job:{job_id}",))

    def history(
        self, job_id: str = "", *, limit: int = 50, before: int | None = None
    ) -> list[JobHistory]:
        """The newest runs (of `job_id`, or of every job), newest first; `before`: older
        than that run's id (the next page)."""
        query = select(JobHistory).order_by(col(JobHistory.id).desc()).limit(limit)
        if job_id:
            query = query.where(col(JobHistory.job_id) == job_id)
        if before is not None:
            query = query.where(col(JobHistory.id) < before)
        with eng.reading(self.engine) as session:
            return list(session.exec(query))


def _runs(session: Session) -> dict[str, JobRun]:
    return {row.job_id: row for row in session.exec(select(JobRun))}


def _schedules(session: Session) -> dict[str, JobSchedule]:
    return {row.job_id: row for row in session.exec(select(JobSchedule))}
