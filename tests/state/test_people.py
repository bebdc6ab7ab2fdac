"""People in state.db: link codes and their lockout, merges, detaching, pairing limits."""

from __future__ import annotations

import sqlite3
import time
from datetime import timedelta

import pytest
from sqlalchemy import text

from hermes.identity import new_user_id
from hermes.state.access import (
    CODE_ALPHABET,
    CODE_LENGTH,
    MAX_FAILURES,
    STALE_BATCH,
    AccessDB,
    Lockout,
    PairingRefused,
    Redeem,
)
from hermes.state.cjk import index_terms
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.models import AccessRule
from hermes.state.people import PeopleDB
from hermes.state.search import SearchScope
from tests.harness.postgres import sqlite_only


def say(db: SessionDB, user: str, platform: str, text: str) -> str:
    session = db.conversations.start_session(user, platform, f"{platform}:dm:{user}")
    db.conversations.add_message(session.id, NewMessage("user", text))
    return session.id


def test_codes_are_eight_unambiguous_characters(db: SessionDB) -> None:
    access = AccessDB(db)
    user = db.people.user_for_identity("telegram", "1")
    codes = {access.create_link_code(user).code for _ in range(50)}
    for code in codes:
        assert len(code) == CODE_LENGTH and set(code) <= set(CODE_ALPHABET)
    assert not set("01OIL") & set(CODE_ALPHABET)
    assert len(codes) == 50


def test_a_code_works_once_for_anyone_and_only_the_latest_of_a_user(db: SessionDB) -> None:
    access = AccessDB(db)
    user = db.people.user_for_identity("telegram", "1")
    first = access.create_link_code(user).code
    second = access.create_link_code(user).code
    assert access.redeem_link_code(first, "slack:U1").status is Redeem.INVALID  # replaced
    used = access.redeem_link_code(second.lower()[:4] + "-" + second[4:], "slack:U1")
    assert used.status is Redeem.OK and used.user_id == user  # case and dashes forgiven
    assert access.redeem_link_code(second, "slack:U2").status is Redeem.INVALID  # used


def test_an_expired_code_is_refused(db: SessionDB) -> None:
    access = AccessDB(db)
    user = db.people.user_for_identity("telegram", "1")
    code = access.create_link_code(user, ttl=timedelta(seconds=-1)).code
    assert access.redeem_link_code(code, "slack:U1").status is Redeem.INVALID


def test_five_wrong_codes_lock_the_requester_out_even_for_a_right_code(db: SessionDB) -> None:
    access = AccessDB(db)
    user = db.people.user_for_identity("telegram", "1")
    code = access.create_link_code(user).code
    results = [access.redeem_link_code("AAAAAAAA", "slack:EVE").status for _ in range(MAX_FAILURES)]
    assert results == [Redeem.INVALID] * (MAX_FAILURES - 1) + [Redeem.LOCKED]
    locked = access.redeem_link_code(code, "slack:EVE")
    assert locked.status is Redeem.LOCKED and locked.locked_until is not None
    assert access.redeem_link_code(code, "slack:ALICE").status is Redeem.OK  # others are not


def test_lockouts_count_per_requester_forget_a_quiet_spell_and_end(db: SessionDB) -> None:
    """The lockouts the dashboard's logins use: each requester counted under its own
    rule in one transaction, a success forgets, failures a quiet spell old are forgotten,
    and a lockout ends when it lasts out."""
    access = AccessDB(db)
    spell = timedelta(seconds=3)  # long enough for a loaded machine's slowest write
    quiet = Lockout(2, timedelta(minutes=5), forgiven_after=spell)
    access.failed({"c": quiet})  # forgotten by the time c fails again, below
    rules = {"a": Lockout(3, spell), "all": Lockout(5, spell)}
    access.failed(rules)
    access.failed(rules)
    assert access.locked_until(["a", "all"]) is None
    access.succeeded("a")  # forgets a's two, not the overall count
    access.failed(rules)
    access.failed(rules)
    assert access.locked_until(["a"]) is None
    access.failed({"b": Lockout(3, spell), "all": rules["all"]})  # the 5th overall
    assert access.locked_until(["a"]) is None
    until = access.locked_until(["a", "all"])
    assert until is not None and access.locked_until(["b", "all"]) == until
    time.sleep(spell.total_seconds() + 0.2)
    assert access.locked_until(["a", "all"]) is None  # it lasted out
    access.failed({"c": quiet})  # the first is forgotten: one failure, not two
    assert access.locked_until(["c"]) is None
    access.failed({"c": quiet})
    assert access.locked_until(["c"]) is not None
    # rows the rule has forgotten anyway go (a, all, b: quiet for the spell, their
    # lockouts over); c, locked and failing just now, stays; only the prefix's rows
    assert access.forget_stale("zz", rules["a"]) == 0
    assert access.forget_stale("", rules["a"]) == 3
    assert access.locked_until(["c"]) is not None


def test_guessers_from_many_addresses_are_all_forgotten(db: SessionDB) -> None:
    """More stale requesters than one transaction forgets (each one's lock is held to
    its end): every one goes, another prefix's stay."""
    access = AccessDB(db)
    brief = Lockout(3, timedelta(microseconds=1))
    access.failed({f"ip:10.0.{n // 250}.{n % 250}": brief for n in range(2 * STALE_BATCH + 1)})
    access.failed({"dash:someone": brief})
    assert access.forget_stale("ip:", brief) == 2 * STALE_BATCH + 1
    assert access.forget_stale("ip:", brief) == 0
    assert access.forget_stale("dash:", brief) == 1


def test_merging_moves_sessions_and_search_follows(db: SessionDB) -> None:
    people = PeopleDB(db)
    keep = db.people.user_for_identity("telegram", "1", "Alice")
    gone = db.people.user_for_identity("slack", "U1", "alice")
    moved = say(db, gone, "slack", "my cat is called Zanzibar")
    say(db, keep, "telegram", "the rent is due Friday")
    people.merge_users(keep, gone)
    assert db.people.get_user(gone) is None
    assert {i.platform for i in db.people.identities_of(keep)} == {"telegram", "slack"}
    assert db.conversations.get_session(moved, keep) is not None
    assert [h.session_id for h in db.conversations.search(SearchScope(keep), "Zanzibar")] == [moved]
    assert db.conversations.search(SearchScope(gone), "Zanzibar") == []
    with db.engine.connect() as conn:  # nothing of the old id is left anywhere
        for table in ("sessions", "messages", "identities", "memory_events"):
            sql = text(f"SELECT count(*) FROM {table} WHERE user_id = :u")
            assert conn.execute(sql, {"u": gone}).scalar_one() == 0, table


def test_merge_keeps_the_higher_role_and_a_block(db: SessionDB) -> None:
    people = PeopleDB(db)
    keep = db.people.user_for_identity("telegram", "1")
    gone = db.people.user_for_identity("slack", "U1")
    people.set_role(gone, "admin")
    people.set_status(gone, "blocked")
    people.merge_users(keep, gone)
    user = db.people.get_user(keep)
    assert user is not None and (user.role, user.status) == ("admin", "blocked")


def test_detaching_gives_the_identity_a_fresh_user_and_keeps_the_data(db: SessionDB) -> None:
    people = PeopleDB(db)
    keep = db.people.user_for_identity("telegram", "1")
    gone = db.people.user_for_identity("slack", "U1")
    session = say(db, gone, "slack", "hello")
    people.merge_users(keep, gone)
    with pytest.raises(ValueError, match="only identity"):
        people.detach_identity(db.people.user_for_identity("discord", "D1"), "discord")
    fresh = people.detach_identity(keep, "slack")
    assert fresh is not None and fresh != keep
    assert db.people.user_for_identity("slack", "U1") == fresh
    assert (
        db.conversations.get_session(session, keep) is not None
    )  # the conversation stays with the person
    assert people.detach_identity(keep, "slack") is None


def test_pairing_reuses_a_live_code_and_enforces_the_limits(db: SessionDB) -> None:
    access = AccessDB(db)
    first = access.request_pairing("telegram", "100", "Stranger")
    again = access.request_pairing("telegram", "100", "Stranger")
    assert first.fresh and not again.fresh
    assert first.request is not None and again.request is not None
    assert first.request.code == again.request.code
    access.request_pairing("telegram", "101", "B")
    access.request_pairing("telegram", "102", "C")
    full = access.request_pairing("telegram", "103", "D")
    assert full.refused is PairingRefused.FULL  # at most 3 pending per platform
    assert access.request_pairing("slack", "U9", "E").fresh  # per platform
    for code in [r.code for r in access.pending_pairings() if r.platform == "telegram"]:
        access.decide_pairing(code, approve=False, by="test")
    assert access.request_pairing("telegram", "100", "Stranger").fresh  # 2nd of the day
    access.decide_pairing(access.pending_pairings()[-1].code, approve=False, by="test")
    assert access.request_pairing("telegram", "100", "Stranger").fresh  # 3rd
    access.decide_pairing(access.pending_pairings()[-1].code, approve=False, by="test")
    rate = access.request_pairing("telegram", "100", "Stranger")
    assert rate.refused is PairingRefused.RATE


def test_approving_allows_the_requester_and_codes_decide_once(db: SessionDB) -> None:
    access = AccessDB(db)
    request = access.request_pairing("discord", "555", "Bob").request
    assert request is not None
    assert access.decide_pairing(request.code, approve=True, by="owner") is not None
    assert access.rules()[("discord", "user", "555")] == "allow"
    assert access.decide_pairing(request.code, approve=False, by="owner") is None


def test_rules_overwrite_each_other(db: SessionDB) -> None:
    access = AccessDB(db)
    access.set_rule(AccessRule(platform="slack", kind="user", subject="U1", rule="allow"))
    access.set_rule(AccessRule(platform="slack", kind="user", subject="U1", rule="block"))
    assert access.rules() == {("slack", "user", "U1"): "block"}


def test_resolve_accepts_ids_and_platform_identities(db: SessionDB) -> None:
    people = PeopleDB(db)
    user = db.people.user_for_identity("telegram", "42")
    assert people.resolve(user) == user
    assert people.resolve("Telegram:42") == user
    assert people.resolve("telegram:43") is None
    assert people.resolve(new_user_id()) is None
    assert people.resolve("nonsense") is None


def test_a_message_edited_by_another_program_is_found_by_its_new_words_only(
    db: SessionDB,
) -> None:
    """Any writer's edit re-indexes the message (SQLite: triggers; PostgreSQL: triggers
    put it on the backlog the next search indexes)."""
    user = db.people.user_for_identity("telegram", "1")
    session = say(db, user, "telegram", "the password hint is pelican")
    assert [h.session_id for h in db.conversations.search(SearchScope(user), "pelican")]
    with db.engine.begin() as conn:
        sql = text("UPDATE messages SET content = 'the hint is albatross' WHERE session_id = :s")
        conn.execute(sql, {"s": session})
    assert db.conversations.search(SearchScope(user), "pelican") == []
    found = db.conversations.search(SearchScope(user), "albatross")
    assert [h.session_id for h in found] == [session]


@sqlite_only
def test_an_edited_message_is_found_by_its_new_words_only(db: SessionDB) -> None:
    """A plain sqlite3 program that registers hermes_cjk (as the schema documents)."""
    user = db.people.user_for_identity("telegram", "1")
    session = say(db, user, "telegram", "the password hint is pelican")
    raw = sqlite3.connect(db.path)  # another program: it registers what the triggers call
    raw.create_function("hermes_cjk", 2, index_terms, deterministic=True)
    with raw:
        raw.execute(
            "UPDATE messages SET content = 'the hint is albatross' WHERE session_id = ?", (session,)
        )
    raw.close()
    assert db.conversations.search(SearchScope(user), "pelican") == []
    assert [h.session_id for h in db.conversations.search(SearchScope(user), "albatross")] == [
        session
    ]
    assert [h.session_id for h in db.conversations.search(SearchScope(user), "hint")] == [session]


def test_an_approval_is_announced_once(db: SessionDB) -> None:
    access = AccessDB(db)
    request = access.request_pairing("telegram", "9", "Nine", chat_id="9").request
    assert request is not None
    access.decide_pairing(request.code, approve=True, by="owner")
    assert [r.chat_id for r in access.unannounced_approvals()] == ["9"]
    assert access.claim_announcement(request.code)
    assert not access.claim_announcement(request.code)  # a second teller backs off
    assert access.unannounced_approvals() == []
