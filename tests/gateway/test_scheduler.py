"""The scheduler: persistent schedule, jobs, and two gateway processes at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway import jobs
from gateway.config import load_config
from gateway.reminders import sweep_job
from gateway.scheduler import RUN_AT_ONCE, Scheduler, control, job_specs, read_status
from hermes.identity import owner_user_id
from hermes.llm.client import LLMClient
from hermes.llm.summarizer import LLMSummarizer
from hermes.memory import entries as fmt
from hermes.memory.consolidation import INSTRUCTIONS
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.loopguard import GUARD
from hermes.state.models import as_utc, utcnow
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness.cli import HERMES, hermes
from tests.harness.wait import until

FULL = [f"Note {i}: the staging cluster runs Postgres replica number {i}" for i in range(1, 9)]


def configure(home: Path, fake: FakeOpenAI, interval: float = 10.0) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake.base_url}\n  model: m\n  max_retries: 0\n  timeout: 10\n"
        "gateway:\n  http:\n    port: 0\n"
        "memory:\n  memory_char_limit: 560\n  consolidation:\n"
        f"    check_interval_minutes: {interval}\n"
    )


def fill_store(home: Path) -> Path:
    folder = home / "memories" / owner_user_id(home)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "MEMORY.md").write_text(fmt.serialize(FULL))  # 85 % of 560
    return folder / "MEMORY.md"


CONSOLIDATED = 2  # entries after good_proposal


def good_proposal(delay: float = 0.0) -> Reply:
    """Notes 1-7 merged; note 8 carried over verbatim (a user who wrote it with `hermes
    memory add` protects it: it is never reworded)."""
    numbers = ", ".join(str(i) for i in range(1, 8))
    text = f"Notes {numbers}: the staging cluster runs Postgres replica number {numbers}"
    merged = {"text": text, "sources": list(range(1, 8))}
    body = {"entries": [merged, {"text": FULL[7], "sources": [8]}], "dropped": []}
    return Reply(text=json.dumps(body), delay=delay)


def test_restart_keeps_the_schedule(home: Path, fake_llm: FakeOpenAI) -> None:
    configure(home, fake_llm)
    config = load_config(home)

    async def start_and_stop() -> dict[str, Any]:
        db = SessionDB.open(home)
        scheduler = Scheduler(home, config, db)
        await scheduler.start()
        times = {s.id: s.next_run for s in scheduler.status() if s.id not in RUN_AT_ONCE}
        await scheduler.stop()
        db.close()
        return times

    first = asyncio.run(start_and_stop())
    # a schedule made again at the second start would be that start's time plus the
    # interval, to the microsecond: it cannot equal the first
    second = asyncio.run(start_and_stop())
    assert first == second and all(first.values())


def off_the_loop(job: Callable[[str], Awaitable[str]], home: Path) -> str:
    """A job's run, with none of its database work on the event loop's thread (the
    gateway's chats share that loop): file walks and SQL happen on other threads."""

    async def go() -> tuple[str, list[str]]:
        with GUARD.watching(asyncio.get_running_loop()) as seen:
            result = await job(str(home))
            return result, list(seen)

    result, seen = asyncio.run(go())
    assert seen == [], "\n".join(dict.fromkeys(seen))
    return result


def test_jobs_do_their_work_off_the_loop(home: Path, fake_llm: FakeOpenAI) -> None:
    configure(home, fake_llm)
    path = fill_store(home)
    db = SessionDB.open(home)
    user = owner_user_id(home)
    db.people.ensure_user(user)
    fake_llm.default = good_proposal()
    assert off_the_loop(jobs.consolidation_check, home) == "applied: 1"
    assert len(fmt.parse(path.read_text())) == CONSOLIDATED
    assert off_the_loop(jobs.consolidation_check, home) == "all stores under the threshold"
    assert off_the_loop(jobs.memory_pending, home) == "no held writes"
    # the consolidation's tokens are the store's person's (the Usage page, hermes usage)
    (used,) = db.usage.totals("person", utcnow().date())
    assert (used.key, used.model, used.prompt, used.completion, used.calls) == (user, "m", 10, 5, 1)
    old = db.conversations.start_session(
        user, "telegram", "k", started_at=utcnow() - timedelta(hours=9)
    )
    db.conversations.add_message(
        old.id, NewMessage("user", "hi", created_at=utcnow() - timedelta(hours=9))
    )
    fresh = db.conversations.start_session(user, "cli", "k2")
    fake_llm.default = Reply(text="nothing")
    assert off_the_loop(jobs.idle_sessions, home) == "finalized 1 idle session(s)"
    (used,) = db.usage.totals("person", utcnow().date())  # and the idle session's review
    assert (used.key, used.calls) == (user, 2)
    ended = db.conversations.get_session(old.id, user)
    assert ended is not None and ended.end_reason == "idle"
    still = db.conversations.get_session(fresh.id, user)
    assert still is not None and still.ended_at is None
    assert off_the_loop(jobs.maintenance, home).startswith("fts optimized")
    assert off_the_loop(sweep_job, home) == "no runner in this process"
    db.close()


def test_no_model_flags_the_store_and_status_shows_it(home: Path) -> None:
    fill_store(home)
    (home / "config.yaml").write_text("memory:\n  memory_char_limit: 560\n")
    assert asyncio.run(jobs.consolidation_check(str(home))) == "no_model: 1"
    # the next check: nothing due, and it says why instead of "all under the threshold"
    again = asyncio.run(jobs.consolidation_check(str(home)))
    assert again.startswith("1 over the threshold waiting to retry (needs consolidation"), again
    assert "no_model" in again
    status = hermes("memory", "status").stdout
    assert "needs consolidation" in status and "no auxiliary model" in status


def test_a_second_gateway_refuses_and_the_first_consolidates_a_store_once(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    configure(home, fake_llm, interval=0.02)  # checks every 1.2 s
    path = fill_store(home)
    SessionDB.open(home).close()  # create the schema before two processes race to
    fake_llm.default = good_proposal(delay=2.0)
    env = dict(os.environ, HERMES_HOME=str(home))
    procs = [
        subprocess.Popen(
            [*HERMES, "gateway", "run"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(fmt.parse(path.read_text())) != CONSOLIDATED:
            time.sleep(0.2)
        # two more checks finished after the store was consolidated (the first may be the
        # one that consolidated it): a second consolidation would have been one of them
        consolidated_at, finished = utcnow(), set()
        db = SessionDB.open(home)
        try:
            while time.monotonic() < deadline + 30 and len(finished) < 2:
                run = db.jobs.job_runs().get("consolidation_check")
                if run is not None and run.last_run_at > consolidated_at:
                    finished.add(run.last_run_at)
                time.sleep(0.1)
        finally:
            db.close()
        assert len(finished) == 2, "the checks stopped running"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        errors = [proc.communicate(timeout=30)[1] for proc in procs]
    codes = sorted(proc.returncode for proc in procs)
    assert codes == [0, 1], errors
    refused = errors[[proc.returncode for proc in procs].index(1)]
    assert "already running" in refused and "Traceback" not in refused
    assert len(fmt.parse(path.read_text())) == CONSOLIDATED
    consolidations = [r for r in fake_llm.requests if r["messages"][0]["content"] == INSTRUCTIONS]
    assert len(consolidations) == 1
    db = SessionDB.open(home)
    statuses = {s.id: s for s in read_status(home, load_config(home), db)}
    assert statuses["consolidation_check"].next_run is not None
    assert statuses["consolidation_check"].last_ok is True
    db.close()
    assert "consolidation_check" in hermes("scheduler", "status").stdout


def test_the_idle_job_writes_no_personal_memory_from_a_group_when_group_memory_is_none(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    configure(home, fake_llm)
    with (home / "config.yaml").open("a") as config:
        config.write("privacy:\n  group_memory: none\n")
    fake_llm.default = Reply.tool_call(
        "memory", {"action": "add", "target": "user", "content": "Works at Initech"}
    )
    db = SessionDB.open(home)
    user = db.people.user_for_identity("telegram", "42")
    long_ago = utcnow() - timedelta(hours=9)
    sessions = {}
    for chat_type, chat_id in (("group", "-100"), ("dm", "42")):
        chat = db.conversations.start_session(
            user, "telegram", chat_id, chat_type=chat_type, chat_id=chat_id, started_at=long_ago
        )
        said = NewMessage("user", "I work at Initech, by the way", created_at=long_ago)
        db.conversations.add_message(chat.id, said)
        sessions[chat_type] = chat.id
    assert asyncio.run(jobs.idle_sessions(str(home))) == "finalized 2 idle session(s)"
    sources = {e.session_id for e in db.memory_log.memory_events(user)}
    assert sources == {sessions["dm"]}  # the DM was reviewed and saved; the group was not
    db.close()


def test_every_path_consolidates_on_the_same_side_model(home: Path, fake_llm: FakeOpenAI) -> None:
    """The side model has one home (gateway.config.side_endpoint): with a tiny model
    for search summaries, consolidation runs on the memory task's model in the gateway,
    in the scheduler's job and from the CLI alike."""
    from gateway.app import build_app

    configure(home, fake_llm)
    with (home / "config.yaml").open("a") as config:
        config.write(
            "auxiliary:\n  session_search:\n    model: tiny\n    timeout: 5\n"
            "  memory:\n    model: careful\n    timeout: 30\n"
        )
    consolidations: list[str] = []

    def answer(request: dict[str, Any]) -> Reply:
        consolidations.append(request["model"])
        return good_proposal()

    db = SessionDB.open(home)
    app = build_app(home, load_config(home), db)
    summarizer = app.agent.search_summarizer
    assert isinstance(summarizer, LLMSummarizer) and isinstance(app.agent.memory.model, LLMClient)
    chosen = {
        "gateway's memory": app.agent.memory.model.endpoint,
        "search summaries": summarizer.client.endpoint,
    }
    assert {use: (e.model, e.timeout) for use, e in chosen.items()} == {
        "gateway's memory": ("careful", 30.0),
        "search summaries": ("tiny", 5.0),
    }
    fake_llm.responder = answer

    async def in_the_gateway() -> None:
        await app.agent.memory.check()
        await app.close()

    for run in (
        lambda: asyncio.run(in_the_gateway()),
        lambda: asyncio.run(jobs.consolidation_check(str(home))),
        lambda: hermes("memory", "consolidate", home=home),
    ):
        fill_store(home)
        run()
    assert consolidations == ["careful", "careful", "careful"]
    db.close()


def test_a_job_never_run_is_due_an_interval_after_it_was_first_scheduled_whatever_restarts(
    home: Path, db: SessionDB
) -> None:
    """The timers live in memory on both backends: `hermes scheduler status` says when a
    job never run is due (an interval after the first gateway scheduled it, however
    often gateways restart since), not "not scheduled", and after a run an interval
    after it; a restart schedules the same times."""
    config = load_config(home)
    assert all(s.next_run is None for s in read_status(home, config, db))  # no gateway yet
    spec = next(s for s in job_specs(config) if s.id not in RUN_AT_ONCE)

    async def start_and_stop() -> datetime | None:
        scheduler = Scheduler(home, config, db)
        await scheduler.start()
        try:
            return next(s.next_run for s in scheduler.status() if s.id == spec.id)
        finally:
            await scheduler.stop()

    first = asyncio.run(start_and_stop())
    assert first is not None
    since = as_utc(db.jobs.job_schedules()[spec.id].since)
    assert first == since + spec.every
    assert asyncio.run(start_and_stop()) == first  # a restart keeps it
    statuses = {s.id: s for s in read_status(home, config, db)}
    assert statuses[spec.id].next_run == first  # the CLI says the same
    db.jobs.record_run(spec.id, True, "ok")
    ran = as_utc(db.jobs.job_runs()[spec.id].last_run_at)
    assert {s.id: s for s in read_status(home, config, db)}[spec.id].next_run == ran + spec.every
    assert asyncio.run(start_and_stop()) == ran + spec.every


def test_an_operator_pauses_a_job_and_asks_for_a_run_that_is_not_due(
    home: Path, db: SessionDB
) -> None:
    """A run asked for (from the dashboard or the CLI, through state.db) starts within
    the poll whatever the schedule, once, and its history says who asked, where it ran
    and how long it took; a paused job skips its runs, asked or due, until resumed; the
    reminder sweep (every gateway's) has no controls; a wrong job is named as such."""
    config = load_config(home)
    user = db.people.ensure_user("u_00000000000000b2").id

    async def scenario() -> None:
        scheduler = Scheduler(home, config, db, asked_poll_s=0.1)
        await scheduler.start()
        try:
            assert "within" in control(db, config, "idle_sessions", "run", user)
            assert "already asked" in control(db, config, "idle_sessions", "run", user)
            await until(lambda: db.jobs.history("idle_sessions"), "the asked run")
            (run,) = db.jobs.history("idle_sessions")
            assert run.ok and run.asked_by == user and run.instance == scheduler.instance
            assert run.summary == "finalized 0 idle session(s)" and run.seconds >= 0
            await until(
                lambda: db.jobs.job_schedules()["idle_sessions"].run_asked_at is None,
                "the ask answered",
            )
            assert "paused" in control(db, config, "memory_pending", "pause", user)
            assert "already paused" in control(db, config, "memory_pending", "pause", user)
            assert "once resumed" in control(db, config, "memory_pending", "run", user)
            polled = scheduler.polls  # three looks for asked runs: none started it
            await until(lambda: scheduler.polls >= polled + 3, "three polls")
            assert db.jobs.history("memory_pending") == []
            status = {s.id: s for s in scheduler.status()}["memory_pending"]
            assert status.paused_by == user and status.run_asked_by == user
            assert "resumed" in control(db, config, "memory_pending", "resume", user)
            await until(lambda: db.jobs.history("memory_pending"), "the run once resumed")
            assert len(db.jobs.history("idle_sessions")) == 1  # asked once, run once
        finally:
            await scheduler.stop()

    asyncio.run(scenario())
    for job, what in (("reminders", "pause"), ("nightly", "run"), ("maintenance", "stop")):
        with pytest.raises(ValueError, match=job if job != "maintenance" else "stop"):
            control(db, config, job, what, user)


def test_the_cli_pauses_resumes_and_runs_a_job_and_shows_its_history(home: Path) -> None:
    """`hermes scheduler pause|resume|run|history`: what the dashboard does, from the
    shell, as the owner; a job that is not one, or has no controls, is a usage error."""
    assert "maintenance paused" in hermes("scheduler", "pause", "maintenance").stdout
    assert "paused since" in hermes("scheduler", "status").stdout
    assert "once resumed" in hermes("scheduler", "run", "maintenance").stdout
    refused = hermes("scheduler", "run", "reminders")
    assert refused.returncode == 2 and "runs on every gateway" in refused.stderr
    refused = hermes("scheduler", "pause", "nightly")
    assert refused.returncode == 2 and "there is no job 'nightly'" in refused.stderr
    assert "maintenance resumed" in hermes("scheduler", "resume", "maintenance").stdout
    assert "No run recorded yet." in hermes("scheduler", "history").stdout
    db = SessionDB.open(home)
    try:
        assert db.jobs.job_schedules()["maintenance"].run_asked_by == owner_user_id(home)
        db.jobs.record_run("maintenance", True, "fts optimized", seconds=2.0, instance="h:7")
    finally:
        db.close()
    shown = hermes("scheduler", "history", "maintenance").stdout
    assert "fts optimized" in shown and "h:7" in shown and "2.0 s" in shown
    runs = json.loads(hermes("scheduler", "history", "--json").stdout)
    assert [(r["job_id"], r["instance"]) for r in runs] == [("maintenance", "h:7")]
