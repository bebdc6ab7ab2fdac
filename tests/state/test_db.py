"""The SessionDB repository."""

from __future__ import annotations

import functools
import json
import secrets
from datetime import timedelta

import pytest

from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.memory_log import MemoryEventRecord
from hermes.state.models import utcnow
from hermes.state.retry import StateDBError
from hermes.state.usage import Usage


def test_session_lifecycle(db: SessionDB, alice: str) -> None:
    chat = db.conversations.start_session(
        alice, "telegram", "telegram:dm:1:1", chat_type="dm", chat_id="1"
    )
    ids = db.conversations.add_messages(
        chat.id,
        [
            NewMessage("user", "Plan   my\ntrip to Busan in October please, with trains and food"),
            NewMessage(
                "assistant",
                "",
                tool_calls=[{"id": "c1", "type": "function", "function": {"name": "memory"}}],
            ),
            NewMessage("tool", '{"success": true}', tool_call_id="c1", tool_name="memory"),
            NewMessage("assistant", "Here is a plan."),
        ],
    )
    assert all(isinstance(i, int) for i in ids)
    stored = db.conversations.get_session(chat.id, alice)
    assert stored is not None and stored.message_count == 4
    assert (
        stored.title == "Plan my trip to Busan in October please, with trains and food"[:59] + "…"
    )
    messages = db.conversations.messages(chat.id, alice)
    assert json.loads(messages[1].tool_calls or "")[0]["id"] == "c1"
    assert messages[2].tool_call_id == "c1"
    db.conversations.end_session(chat.id, "user_reset")
    ended = db.conversations.get_session(chat.id, alice)
    assert ended is not None and ended.end_reason == "user_reset" and ended.ended_at is not None


def test_redelivered_platform_message_is_stored_once(db: SessionDB, alice: str) -> None:
    chat = db.conversations.start_session(alice, "slack", "slack:dm:D1:U1")
    first = db.conversations.add_message(
        chat.id, NewMessage("user", "hi", platform_message_id="D1:1700.1")
    )
    again = db.conversations.add_message(
        chat.id, NewMessage("user", "hi", platform_message_id="D1:1700.1")
    )
    other = db.conversations.add_message(
        chat.id, NewMessage("user", "yo", platform_message_id="D1:1700.2")
    )
    assert isinstance(first, int) and again is None and isinstance(other, int)
    stored = db.conversations.get_session(chat.id, alice)
    assert stored is not None and stored.message_count == 2


def test_one_message_at_a_time_keeps_the_session_row_in_step(db: SessionDB, alice: str) -> None:
    """A turn stores its question and its answer one message at a time (on PostgreSQL
    one statement each): the count, title, last activity and token counts move as for a
    batch, a redelivery moves none of them but the tokens it is given, and a session
    that is not there is an error, not a message stored nowhere."""
    chat = db.conversations.start_session(alice, "telegram", "telegram:dm:7:7")
    began = utcnow()
    later = began + timedelta(minutes=5)
    asked = NewMessage("user", "  where is   my\nparcel?", platform_message_id="7:1")
    first = db.conversations.add_messages(chat.id, [asked], usage=None)
    answer = NewMessage("assistant", "On its way.", created_at=later)
    second = db.conversations.add_messages(chat.id, [answer], usage=Usage(120, 7, "m"))
    again = db.conversations.add_messages(chat.id, [asked], usage=Usage(3, 1, "m"))
    assert isinstance(first[0], int) and isinstance(second[0], int) and again == [None]
    stored = db.conversations.get_session(chat.id, alice)
    assert stored is not None
    assert (stored.message_count, stored.title) == (2, "where is my parcel?")
    assert (stored.prompt_tokens, stored.completion_tokens) == (123, 8)
    assert [(u.prompt, u.completion, u.calls) for u in db.usage.totals("day", began.date())] == [
        (123, 8, 2)
    ]
    moved = stored.last_active_at.replace(tzinfo=None) - later.replace(tzinfo=None)
    assert abs(moved.total_seconds()) < 0.01
    untouched = db.conversations.add_messages(chat.id, [asked])
    assert untouched == [None]
    assert db.conversations.get_session(chat.id, alice) == stored
    with pytest.raises(StateDBError, match="no session"):
        db.conversations.add_messages("s_missing", [NewMessage("user", "hello?")])
    assert [m.content for m in db.conversations.messages(chat.id, alice)] == [
        "  where is   my\nparcel?",
        "On its way.",
    ]


def test_same_platform_message_id_on_another_platform_is_distinct(
    db: SessionDB, alice: str
) -> None:
    a = db.conversations.start_session(alice, "telegram", "t")
    b = db.conversations.start_session(alice, "discord", "d")
    assert (
        db.conversations.add_message(a.id, NewMessage("user", "x", platform_message_id="42"))
        is not None
    )
    assert (
        db.conversations.add_message(b.id, NewMessage("user", "x", platform_message_id="42"))
        is not None
    )


def test_sessions_are_scoped_to_their_user(db: SessionDB, alice: str, bob: str) -> None:
    chat = db.conversations.start_session(alice, "cli", "cli:dm")
    db.conversations.add_message(chat.id, NewMessage("user", "secret plans"))
    assert db.conversations.get_session(chat.id, bob) is None
    assert db.conversations.messages(chat.id, bob) == []
    assert db.conversations.list_sessions(bob) == []
    assert db.conversations.latest_session(bob) is None
    message_id = db.conversations.messages(chat.id, alice)[0].id
    assert message_id is not None and db.conversations.message(message_id, bob) is None


def test_system_prompt_is_stored_once_by_hash(db: SessionDB, alice: str) -> None:
    a = db.conversations.start_session(alice, "cli", "k1", system_prompt="You are Hermes.")
    b = db.conversations.start_session(alice, "telegram", "k2", system_prompt="You are Hermes.")
    assert a.system_prompt_hash == b.system_prompt_hash is not None
    assert db.conversations.system_prompt(a.system_prompt_hash or "") == "You are Hermes."


def test_latest_session_spans_platforms(db: SessionDB, alice: str) -> None:
    old = db.conversations.start_session(
        alice, "cli", "k1", started_at=utcnow() - timedelta(days=1)
    )
    new = db.conversations.start_session(alice, "telegram", "k2")
    latest = db.conversations.latest_session(alice)
    assert latest is not None and latest.id == new.id != old.id


def test_memory_events_and_why(db: SessionDB, alice: str, bob: str) -> None:
    chat = db.conversations.start_session(alice, "telegram", "k")
    message_id = db.conversations.add_message(chat.id, NewMessage("user", "I moved to Busan"))
    db.memory_log.record_memory_event(
        MemoryEventRecord(
            alice, "user", "add", None, "Lives in Busan", "agent", chat.id, message_id
        )
    )
    db.memory_log.record_memory_event(
        MemoryEventRecord(alice, "user", "replace", "Lives in Busan", "Lives in Seoul", "user")
    )
    events = db.memory_log.memory_events(alice, "Busan")
    assert [e.action for e in events] == ["replace", "add"]
    assert events[1].session_id == chat.id and events[1].message_id == message_id
    assert db.memory_log.memory_events(bob, "Busan") == []
    assert db.memory_log.memory_events(alice, "100%_") == []  # LIKE wildcards are literal


def test_prune(db: SessionDB, alice: str) -> None:
    old = db.conversations.start_session(
        alice, "cli", "k1", started_at=utcnow() - timedelta(days=40)
    )
    db.conversations.add_message(
        old.id, NewMessage("user", "ancient", created_at=utcnow() - timedelta(days=40))
    )
    fresh = db.conversations.start_session(alice, "cli", "k2")
    db.conversations.add_message(fresh.id, NewMessage("user", "recent"))
    assert db.upkeep.prune(30, dry_run=True) == 1
    assert db.conversations.get_session(old.id, alice) is not None
    assert db.upkeep.prune(30, dry_run=False) == 1
    assert (
        db.conversations.get_session(old.id, alice) is None
        and db.conversations.get_session(fresh.id, alice) is not None
    )
    assert db.conversations.count_messages() == 1
    assert db.upkeep.integrity_check() == "ok"


def test_the_size_of_state_db_is_known_on_either_backend(db: SessionDB, alice: str) -> None:
    """The dashboard's Status page says how much state.db takes (on PostgreSQL too)."""
    before = db.upkeep.size_bytes()
    chat = db.conversations.start_session(alice, "cli", "cli:size")
    text = [NewMessage("user", secrets.token_hex(100_000)) for _ in range(20)]  # 4 MB
    db.conversations.add_messages(chat.id, text)
    after = db.upkeep.size_bytes()
    assert before > 0 and after > before


def test_a_message_counts_as_answered_only_by_its_own_reply(db: SessionDB) -> None:
    """For a gateway taking over: a message whose turn was cut (its model call in
    flight when its instance died) while the next one was answered elsewhere is not
    answered by that later reply: its sender is asked to send it again."""
    user = db.people.ensure_user("u_00000000000000c7").id
    chat = db.conversations.start_session(user, "telegram", "telegram:dm:7")
    tool_call = [
        {"id": "c1", "type": "function", "function": {"name": "memory", "arguments": "{}"}}
    ]
    for message in (
        NewMessage("user", "first", platform_message_id="7:1"),  # cut mid-turn
        NewMessage("user", "second", platform_message_id="7:2"),
        NewMessage("assistant", "to the second"),
        NewMessage("user", "third", platform_message_id="7:3,7:4"),  # a merged turn
        NewMessage("assistant", "", tool_calls=tool_call),
        NewMessage("tool", "{}", tool_call_id="c1", tool_name="memory"),
        NewMessage("assistant", "to the third and fourth"),
        NewMessage("user", "fifth", platform_message_id="7:5"),
    ):
        db.conversations.add_message(chat.id, message)

    def outcome(message: str) -> str:
        return db.conversations.turn_outcome("telegram:dm:7", message).state

    assert outcome("7:1") == "asked"
    assert outcome("7:2") == "answered"
    assert outcome("7:4") == "answered"
    assert outcome("7:5") == "asked"
    assert outcome("7:6") == "new"


def test_a_reply_stored_and_never_handed_over_is_sent_by_the_next_holder(db: SessionDB) -> None:
    """A reply is "stored" until it is on its way; one whose instance stopped before it
    was handed to the platform is sent by whoever takes the session next (with its
    text), one that was on its way is never sent twice."""
    user = db.people.ensure_user("u_00000000000000c8").id
    chat = db.conversations.start_session(user, "telegram", "telegram:dm:8")
    add = functools.partial(db.conversations.add_message, chat.id)
    add(NewMessage("user", "one", platform_message_id="8:1"))
    unsent = add(NewMessage("assistant", "to one", delivery="stored"))
    add(NewMessage("user", "two", platform_message_id="8:2"))
    on_its_way = add(NewMessage("assistant", "to two", delivery="stored"))
    assert unsent is not None and on_its_way is not None
    db.conversations.set_delivery(on_its_way, "sending")
    first = db.conversations.turn_outcome("telegram:dm:8", "8:1")
    assert (first.state, first.reply_id, first.reply) == ("unsent", unsent, "to one")
    assert db.conversations.turn_outcome("telegram:dm:8", "8:2").state == "answered"
    db.conversations.set_delivery(unsent, "sent")
    assert db.conversations.turn_outcome("telegram:dm:8", "8:1").state == "answered"
