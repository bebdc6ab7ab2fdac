"""The scheduler's record: runs, their bounded history, an operator's controls."""

from __future__ import annotations

from datetime import timedelta

from hermes.state.db import SessionDB
from hermes.state.jobs import HISTORY_KEPT
from hermes.state.models import as_utc, utcnow


def test_a_run_answers_the_ask_made_before_it_started_not_one_made_during_it(
    db: SessionDB,
) -> None:
    assert db.jobs.ask_run("maintenance", "u_1") and not db.jobs.ask_run("maintenance", "u_2")
    asked = db.jobs.job_schedules()["maintenance"]
    assert asked.run_asked_by == "u_1" and asked.run_asked_at is not None
    db.jobs.record_run("maintenance", True, "ok", started_at=utcnow() - timedelta(seconds=30))
    assert db.jobs.job_schedules()["maintenance"].run_asked_at is not None  # asked mid-run
    db.jobs.record_run("maintenance", True, "ok", started_at=utcnow())
    answered = db.jobs.job_schedules()["maintenance"]
    assert answered.run_asked_at is None and answered.run_asked_by == ""
    assert db.jobs.pause("maintenance", "cli") and not db.jobs.pause("maintenance", "u_1")
    paused = db.jobs.job_schedules()["maintenance"]
    assert paused.paused_by == "cli" and paused.paused_at is not None
    assert db.jobs.resume("maintenance") and not db.jobs.resume("maintenance")
    assert as_utc(answered.since) <= utcnow()


def test_each_jobs_history_keeps_its_newest_runs_and_pages_back(db: SessionDB) -> None:
    for n in range(HISTORY_KEPT + 3):
        db.jobs.record_run("idle_sessions", n % 7 != 0, f"run {n}", seconds=0.25, instance="h:1")
    db.jobs.record_run("maintenance", False, "OperationalError: " + "x" * 900)
    runs = db.jobs.history("idle_sessions", limit=HISTORY_KEPT + 10)
    assert len(runs) == HISTORY_KEPT
    assert [r.summary for r in runs[:2]] == [f"run {HISTORY_KEPT + 2}", f"run {HISTORY_KEPT + 1}"]
    assert runs[-1].summary == "run 3"  # the three oldest dropped
    page = db.jobs.history("idle_sessions", limit=10, before=runs[9].id)
    assert [r.summary for r in page] == [r.summary for r in runs[10:20]]
    everyone = db.jobs.history(limit=2)
    assert [r.job_id for r in everyone] == ["maintenance", "idle_sessions"]
    assert not everyone[0].ok and len(everyone[0].summary) == 500
    last = db.jobs.job_runs()
    assert last["idle_sessions"].summary == f"run {HISTORY_KEPT + 2}" and not last["maintenance"].ok
