"""Access verdicts as a table: one person resolved per event, by gateway/admission/people.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.admission.people import People, Verdict
from gateway.app import build_memory
from gateway.config import HermesConfig
from gateway.edge.events import ChatRef, MessageEvent, UserRef
from hermes.places import ChatType
from hermes.state.db import SessionDB
from hermes.state.models import AccessRule


def event(user: str, chat: str | None = None, platform: str = "telegram") -> MessageEvent:
    where = ChatRef(chat, ChatType.GROUP) if chat else ChatRef(user, ChatType.DM)
    return MessageEvent(
        platform, f"e-{user}-{chat}", f"m-{user}-{chat}", where, UserRef(user), "hi"
    )


@pytest.fixture
def db(home: Path) -> Iterator[SessionDB]:
    database = SessionDB.open(home)
    yield database
    database.close()


def people(db: SessionDB, **config: Any) -> People:
    settings = HermesConfig.model_validate(config)
    return People(settings, db, build_memory(db.path.parent, settings, db, None))


def rule(db: SessionDB, subject: str, verdict: str, kind: str = "user") -> None:
    db.access.set_rule(AccessRule(platform="telegram", kind=kind, subject=subject, rule=verdict))


ALLOWLIST = {"platforms": {"telegram": {"allowed_users": ["1"], "allowed_chats": ["-100"]}}}


# (case, config, setup, sender, group chat or None for a DM, verdict)
VERDICTS: list[tuple[str, dict[str, Any], list[Any], str, str | None, str]] = [
    ("allow_all lets anyone in", {"access": {"allow_all": True}}, [], "9", None, "allow"),
    ("an allowlisted user", ALLOWLIST, [], "1", None, "allow"),
    ("a stranger's DM gets pairing", ALLOWLIST, [], "9", None, "pair"),
    ("pairing off: silence", {"access": {"pairing": False}}, [], "9", None, "deny"),
    ("a stranger in a group: silence", ALLOWLIST, [], "9", "-200", "deny"),
    ("anyone in an allowed chat", ALLOWLIST, [], "9", "-100", "allow"),
    ("a chat allowed at run time", {}, [("chat", "-300", "allow")], "9", "-300", "allow"),
    ("a user allowed at run time", {}, [("user", "9", "allow")], "9", None, "allow"),
    ("an admin is in", {}, ["role:admin"], "9", None, "allow"),
    ("an owner is in", {}, ["role:owner"], "9", None, "allow"),
    ("a linked account allowed elsewhere", ALLOWLIST, ["link:1"], "9", None, "allow"),
    (
        "a block wins over allow_all",
        {"access": {"allow_all": True}},
        [("user", "1", "block")],
        "1",
        None,
        "deny",
    ),
    ("a block wins over the allowlist", ALLOWLIST, [("user", "1", "block")], "1", None, "deny"),
    ("a blocked user is silent", ALLOWLIST, ["status:blocked"], "1", None, "deny"),
    (
        "a blocked chat wins over allowed",
        ALLOWLIST,
        [("chat", "-100", "block")],
        "1",
        "-100",
        "deny",
    ),
    ("a blocked admin is silent", {}, ["role:admin", "status:blocked"], "9", None, "deny"),
    # the owner always stays reachable: a rule or a block set some other way never denies
    (
        "a rule never silences the owner",
        {},
        ["role:owner", ("user", "9", "block")],
        "9",
        None,
        "allow",
    ),
    ("a block never silences the owner", {}, ["role:owner", "status:blocked"], "9", None, "allow"),
]


@pytest.mark.parametrize("row", VERDICTS, ids=[row[0] for row in VERDICTS])
def test_access_verdicts(db: SessionDB, row: tuple[Any, ...]) -> None:
    case, config, setup, sender, chat, verdict = row
    for step in setup:
        if isinstance(step, tuple):
            kind, subject, value = step
            rule(db, subject, value, kind)
            continue
        what, _, value = step.partition(":")
        user = db.people.user_for_identity("telegram", sender)
        if what == "role":
            db.people.set_role(user, value)
        elif what == "status":
            db.people.set_status(user, value)
        elif what == "link":  # the sender's user also owns the allowlisted identity `value`
            db.people.merge_users(user, db.people.user_for_identity("telegram", value))
    person = people(db, **config).resolve(event(sender, chat))
    assert person.verdict is Verdict(verdict), case


def test_a_stranger_is_not_registered_until_admitted(db: SessionDB) -> None:
    who = people(db, **ALLOWLIST)
    stranger = who.resolve(event("9"))
    assert stranger.verdict is Verdict.PAIR and stranger.user_id == ""
    assert db.people.user_by_identity("telegram", "9") is None
    allowed = who.resolve(event("1"))
    assert allowed.admitted and allowed.user_id == db.people.user_by_identity("telegram", "1")


def test_a_change_made_elsewhere_is_seen_at_the_next_event(db: SessionDB, home: Path) -> None:
    who = people(db, **ALLOWLIST)
    assert who.resolve(event("9")).verdict is Verdict.PAIR
    other = SessionDB.open(home)  # another process: the CLI approving someone
    try:
        other.access.set_rule(
            AccessRule(platform="telegram", kind="user", subject="9", rule="allow")
        )
    finally:
        other.close()
    assert who.resolve(event("9")).verdict is Verdict.ALLOW  # no wait for the cache


def test_pairing_replies_are_rate_limited_per_requester(db: SessionDB) -> None:
    who = people(db, **ALLOWLIST)
    first = who.pairing_reply(event("9"))
    assert first is not None and "hermes pairing approve" in first
    assert who.pairing_reply(event("9")) is None  # within the minute
    assert who.pairing_reply(event("8")) is not None  # someone else
