"""Tokens per person, day and model: counted with each reply, moved by a link, kept from
the sessions' totals by the upgrade that added them."""

from __future__ import annotations

import sqlite3
from datetime import date, timedelta
from pathlib import Path

from hermes.state import engine as eng
from hermes.state.cjk import index_terms
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.models import utcnow
from hermes.state.usage import Usage, Used


def reply(db: SessionDB, session_id: str, usage: Usage, *, pair: bool = False) -> None:
    """A turn's answer (alone: PostgreSQL's one-statement path) or a question and its
    answer together (the path of several messages)."""
    rows = [NewMessage("assistant", "sure")]
    if pair:
        rows.insert(0, NewMessage("user", "and?"))
    db.conversations.add_messages(session_id, rows, usage=usage)


def test_each_reply_adds_its_tokens_to_its_person_day_and_model(db: SessionDB) -> None:
    ada = db.people.ensure_user("u_00000000000000a1", display_name="Ada").id
    bo = db.people.ensure_user("u_00000000000000b2", display_name="Bo").id
    first = db.conversations.start_session(ada, "telegram", "telegram:dm:1")
    second = db.conversations.start_session(ada, "discord", "discord:dm:1")
    third = db.conversations.start_session(bo, "cli", "cli:dm")
    reply(db, first.id, Usage(1000, 50, "gpt-4o-mini"))
    reply(db, second.id, Usage(2000, 70, "gpt-4o-mini"), pair=True)
    reply(db, first.id, Usage(500, 5, "big-model"))
    reply(db, third.id, Usage(300, 30, "gpt-4o-mini"))
    reply(db, third.id, Usage(0, 0, "gpt-4o-mini"))  # an endpoint that reports nothing
    today = utcnow().date()
    people = sorted(db.usage.totals("person", today), key=lambda u: (u.key, u.model))
    assert people == [
        Used(ada, "big-model", 500, 5, 1),
        Used(ada, "gpt-4o-mini", 3000, 120, 2),
        Used(bo, "gpt-4o-mini", 300, 30, 1),
    ]
    days = sorted(db.usage.totals("day", today - timedelta(days=6)), key=lambda u: u.model)
    day = today.isoformat()
    assert days == [Used(day, "big-model", 500, 5, 1), Used(day, "gpt-4o-mini", 3300, 150, 3)]
    assert db.usage.totals("day", today, user_id=bo) == [Used(day, "gpt-4o-mini", 300, 30, 1)]
    assert db.usage.totals("day", today + timedelta(days=1)) == []
    chat = db.conversations.get_session(first.id, ada)
    assert chat is not None and (chat.prompt_tokens, chat.completion_tokens) == (1500, 55)
    # a link: Bo's counts are Ada's from now on, added to hers, not beside them
    db.people.merge_users(ada, bo)
    merged = sorted(db.usage.totals("person", today), key=lambda u: u.model)
    assert merged == [Used(ada, "big-model", 500, 5, 1), Used(ada, "gpt-4o-mini", 3300, 150, 3)]


def test_the_upgrade_keeps_what_the_sessions_counted_on_the_day_each_was_last_active(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    old = eng.open_engine(path)
    eng.migrate_to(old, 24)  # as version 24 left it: tokens counted per session only
    old.dispose()
    raw = sqlite3.connect(path)  # (another program: it registers what the triggers call)
    raw.create_function("hermes_cjk", 2, index_terms, deterministic=True)
    user = "u_00000000000000c3"
    raw.execute(
        "INSERT INTO users(id, role, status, created_at) VALUES (?, 'owner', 'active', "
        "'2026-10-01')",
        (user,),
    )
    for n, (day, tokens) in enumerate((("2026-10-02", 100), ("2026-10-02", 40), ("2026-10-05", 0))):
        sid = f"s_000000000000000{n}"
        raw.execute(
            "INSERT INTO sessions(id, session_key, user_id, platform, started_at, "
            "last_active_at, prompt_tokens, completion_tokens) "
            "VALUES (?, ?, ?, 'cli', ?, ?, ?, ?)",
            (sid, f"k{n}", user, day, f"{day} 10:00:00.000000", tokens, tokens // 10),
        )
        for role in ("user", "assistant", "user", "assistant"):
            raw.execute(
                "INSERT INTO messages(session_id, user_id, platform, role, content, created_at) "
                "VALUES (?, ?, 'cli', ?, 'x', ?)",
                (sid, user, role, day),
            )
    raw.commit()
    raw.close()
    db = SessionDB(path)
    try:
        assert db.upgraded_from == 24
        assert db.usage.totals("day", date(2026, 10, 1)) == [Used("2026-10-02", "", 140, 14, 4)]
    finally:
        db.close()


def test_a_call_outside_a_reply_is_counted_on_its_day(db: SessionDB) -> None:
    ada = db.people.ensure_user("u_00000000000000a1").id
    db.usage.add(ada, Usage(10, 1, "side"), day="2026-11-01")
    db.usage.add(ada, Usage(5, 1, "side"), day="2026-11-01")
    db.usage.add(ada, Usage(7, 0, "side"))
    since = date(2026, 11, 1)
    assert sorted(db.usage.totals("day", since), key=lambda u: u.key) == [
        Used("2026-11-01", "side", 15, 2, 2),
        Used(utcnow().date().isoformat(), "side", 7, 0, 1),
    ]
    assert db.usage.totals("day", date(2026, 11, 2), user_id=ada)[0].prompt == 7
