"""Reminders through the whole gateway: the model sets one in a Telegram chat, the
scheduler's job store wakes it on time; a restart in the middle; a run missed while the
gateway was down; two gateways on one state.db."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from gateway.config import load_config
from gateway.runtime import Gateway
from hermes.state.db import SessionDB
from hermes.state.models import as_utc, utcnow
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.reminders import telegram_reminder
from tests.harness.wait import until

T = TypeVar("T")
ENV = {"TG_TOKEN": "123:ABC"}
OWNER = "u_00000000000000c3"


def configure(home: Path, fake_llm: FakeOpenAI, tg: FakeTelegram) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake_llm.base_url}\n  model: m\n  max_retries: 0\n"
        "memory:\n  review_interval: 0\n"
        "access:\n  allow_all: true\n"
        f"platforms:\n  telegram:\n    enabled: true\n    token_env: TG_TOKEN\n"
        f"    base_url: {tg.base_url}\n"
        "gateway:\n  http:\n    port: 0\n"
    )


async def gateway(home: Path) -> tuple[Gateway, SessionDB]:
    db = SessionDB.open(home)
    running = Gateway(home, load_config(home), db, ENV)
    await running.start()
    return running, db


async def stop(running: Gateway, db: SessionDB) -> None:
    await running.stop()
    db.close()


def reminders_sent(tg: FakeTelegram) -> list[tuple[float, str]]:
    return [
        (at, str(params["text"]))
        for (method, at), (_, params) in zip(tg.timeline, tg.calls, strict=True)
        if method == "sendMessage" and "Reminder" in str(params["text"])
    ]


def run(body: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(body())


def test_a_reminder_set_in_chat_arrives_on_time_in_that_chat(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    configure(home, fake_llm, telegram)
    fake_llm.push(
        Reply.tool_call(
            "schedule", {"action": "add", "message": "stretch", "when": "in 3 seconds"}
        ),
        Reply(text="I'll remind you in 3 seconds."),
    )

    async def body() -> tuple[float, float, list[str]]:
        running, db = await gateway(home)
        try:
            telegram.user_message("remind me in 3 seconds to stretch", user_id=42)
            await until(telegram.sent, "no answer")
            (reminder,) = db.reminders.of_user(None)
            due = reminder.due_at
            assert due is not None
            wake = running.scheduler.next_run(f"reminder:{reminder.id}")
            assert wake == as_utc(due)  # its own wake-up, at its time, not the sweep
            sent = await until(lambda: reminders_sent(telegram), "the reminder never came")
            delay = time.time() - due.timestamp() - (time.monotonic() - sent[0][0])
            return delay, due.timestamp(), [t for _, t in sent]
        finally:
            await stop(running, db)

    delay, _, texts = run(body)
    assert texts == ["⏰ <b>Reminder</b>: stretch"]
    assert -0.5 < delay < 3.0  # its own job, at its time (not the 30 s sweep)
    chats = {p["chat_id"] for p in telegram.sent()}
    assert chats == {42}


def finished(db: SessionDB, reminder_id: str) -> bool:
    """The reminder has runs, and none of them is still sending."""
    runs = db.reminders.runs(reminder_id)
    return bool(runs) and all(run.finished_at is not None for run in runs)


def db_due(home: Path, reminder_id: str) -> datetime:
    db = SessionDB.open(home)
    try:
        reminder = db.reminders.get(reminder_id)
        assert reminder is not None and reminder.due_at is not None
        return reminder.due_at
    finally:
        db.close()


def seed(home: Path, **fields: Any) -> str:
    db = SessionDB.open(home)
    try:
        db.people.ensure_user(OWNER, display_name="Ann")
        db.people.ensure_identity("telegram", "42", OWNER)
        reminder = telegram_reminder(OWNER, "42", timezone="Europe/Berlin", **fields)
        added = db.reminders.add(50, reminder)
        assert added is not None
        return added.id
    finally:
        db.close()


def test_a_restart_in_the_middle_delivers_once_after(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    configure(home, fake_llm, telegram)

    async def body() -> None:
        running, db = await gateway(home)
        reminder_id = seed(home, text="take the cake out", due_at=utcnow() + timedelta(seconds=4))
        assert running.reminders is not None
        running.reminders.added(db.reminders.get(reminder_id))  # type: ignore[arg-type]
        await stop(running, db)  # down before it is due
        due = db_due(home, reminder_id)
        await until(
            lambda: utcnow().replace(tzinfo=None) > due.replace(tzinfo=None), "the due time"
        )
        assert reminders_sent(telegram) == []
        running, db = await gateway(home)
        try:
            await until(lambda: reminders_sent(telegram), "not delivered after the restart")
            # a send happens only under a claimed run, and the run is finished after it:
            # once finished, every copy that run could send has been sent
            await until(lambda: finished(db, reminder_id), "the run never finished")
            assert [t for _, t in reminders_sent(telegram)] == [
                "⏰ <b>Reminder</b>: take the cake out"
            ]
            (run_row,) = db.reminders.runs(reminder_id)
            assert run_row.status == "delivered"
        finally:
            await stop(running, db)

    run(body)


def test_missed_runs_give_one_late_delivery_and_two_gateways_never_double(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    configure(home, fake_llm, telegram)
    once = seed(home, text="pay the rent", due_at=utcnow() - timedelta(minutes=30))
    # hourly, half an hour away from now: two runs missed, none due while the test runs
    minute = (utcnow().minute + 30) % 60
    every = seed(
        home, text="stand up", cron=f"{minute} * * * *", due_at=utcnow() - timedelta(hours=2)
    )

    async def body() -> None:
        first, db1 = await gateway(home)
        second, db2 = await gateway(home)
        try:
            await until(lambda: len(reminders_sent(telegram)) >= 2, "not caught up")
            # each send is under a claimed run, finished after it (see above); a burst
            # would be more runs, which the reminders' state after the catch-up forbids
            await until(lambda: finished(db1, once) and finished(db1, every), "runs unfinished")
            texts = sorted(t for _, t in reminders_sent(telegram))
            assert len(texts) == 2, texts
            assert all("late: this was due" in t for t in texts)
            assert (
                sum("pay the rent" in t for t in texts) == sum("stand up" in t for t in texts) == 1
            )
            later = db1.reminders.get(every)
            assert later is not None and later.due_at is not None
            assert later.due_at.replace(tzinfo=None) > utcnow().replace(tzinfo=None)
            assert db1.reminders.get(once).status == "done"  # type: ignore[union-attr]
            assert [r.late for r in db1.reminders.runs(every)] == [True]
        finally:
            await stop(second, db2)
            await stop(first, db1)

    run(body)
