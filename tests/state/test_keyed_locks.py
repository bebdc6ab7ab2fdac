"""Locks by key on PostgreSQL: a write locks what it touches (a person's identity, a
reminder, a memory change), not the whole database, so several gateways' writes of
different people go on side by side, and no write locks the whole database. SQLite keeps
its one writer."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hermes.identity import new_user_id
from hermes.state import engine as eng
from hermes.state.access import LINK_CODES
from hermes.state.db import SessionDB
from hermes.state.factstore import ServerFactStore
from hermes.state.memory_log import memory_keys
from hermes.state.models import AccessRule, utcnow
from tests.harness.postgres import ScratchServer
from tests.harness.reminders import telegram_reminder

HOLD_S = 30.0  # a held lock is let go by the test, or after this


@pytest.fixture
def pg(home: Path, postgres: ScratchServer) -> Iterator[SessionDB]:
    name, url = postgres.schema()
    db = SessionDB.open(home, url)
    yield db
    db.close()
    postgres.drop_schema(name)


class Holder:
    """Another gateway's write transaction, holding `keys` until `release`."""

    def __init__(self, db: SessionDB, keys: list[str]) -> None:
        self.held, self.release = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._hold, args=(db, keys), daemon=True)
        self._thread.start()
        assert self.held.wait(10), "the lock was never taken"

    def _hold(self, db: SessionDB, keys: list[str]) -> None:
        def work(_session: Any) -> None:
            self.held.set()
            self.release.wait(HOLD_S)

        eng.with_retry(db.engine, work, db.patience, keys=keys)

    def let_go(self) -> None:
        self.release.set()
        self._thread.join(10)


def started(call: Callable[[], Any]) -> tuple[threading.Event, list[Any]]:
    """`call` on a thread of its own: (set when it returned, what it returned)."""
    done, result = threading.Event(), []

    def run() -> None:
        result.append(call())
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done, result


def reminder(db: SessionDB, user_id: str) -> str:
    db.people.ensure_user(user_id)
    row = telegram_reminder(user_id, "1", "stand up", due_at=utcnow() - timedelta(seconds=1))
    added = db.reminders.add(50, row)
    assert added is not None
    return added.id


def test_writes_of_other_keys_go_on_while_one_is_held(pg: SessionDB) -> None:
    mine, theirs = reminder(pg, new_user_id()), reminder(pg, new_user_id())
    someone = pg.people.ensure_user(new_user_id()).id
    holder = Holder(pg, [f"reminder:{mine}"])  # a gateway delivering `mine`
    try:
        others = [
            lambda: pg.reminders.claim(theirs, "gw2", 4, utcnow()),  # another reminder
            lambda: pg.people.user_for_identity("telegram", "1001", "Ann"),  # a new person
            lambda: pg.conversations.start_session(someone, "telegram", "k"),
        ]
        for call in others:
            done, _ = started(call)
            assert done.wait(10), "a write of another key waited for the held one"
        same, claimed = started(lambda: pg.reminders.claim(mine, "gw2", 4, utcnow()))
        assert not same.wait(0.5), "a write of the held key did not wait"
    finally:
        holder.let_go()
    assert same.wait(10) and claimed[0] is not None  # then it went through


def test_a_persons_memory_and_provider_writes_wait_only_for_that_persons(pg: SessionDB) -> None:
    """A long memory change of Bob (a consolidation's write, a guard's judgement) holds
    Bob's memory; Ann's memory change, her provider writes and their claim, her
    consolidation state, a file's bytes and a session's end go on beside it."""
    ann, bob = (pg.people.ensure_user(new_user_id()).id for _ in range(2))
    chat = pg.conversations.start_session(ann, "telegram", "k")
    stores = pg.memory_stores

    def remember(user_id: str, text: str) -> bool:
        def work() -> bool:
            return stores.swap(stores.read(user_id, "memory", for_update=True), text, "")

        return stores.change([user_id], work)

    holder = Holder(pg, memory_keys([bob]))
    try:
        others = [
            lambda: remember(ann, "Likes tea"),
            lambda: pg.outbox.add("mem0", ann, "sync_turn", {"user": "hi"}),
            lambda: pg.outbox.claim("mem0", ann, "gw2", timedelta(seconds=30)),
            lambda: pg.memory_log.update_consolidation_state(ann, "memory", attempts=1),
            lambda: pg.conversations.put_media_bytes("media/ab.png", b"x" * 1000),
            lambda: pg.conversations.end_session(chat.id, "new"),
        ]
        for number, call in enumerate(others):
            done, _ = started(call)
            assert done.wait(10), f"write {number} of another person waited for Bob's memory"
        same, wrote = started(lambda: remember(bob, "Owns a boat"))
        assert not same.wait(0.5), "a change of Bob's memory did not wait for the held one"
    finally:
        holder.let_go()
    assert same.wait(10) and wrote == [True]
    assert stores.read(ann, "memory").text == "Likes tea"


def allow(subject: str) -> AccessRule:
    return AccessRule(platform="slack", kind="user", subject=subject, rule="allow", created_by="")


def fact(store: ServerFactStore, user_id: str, text: str) -> int:
    return store.add(user_id, text, category="note", source="test", entities=[], body=text)


def test_no_write_locks_the_whole_database(pg: SessionDB) -> None:
    """What took the whole database's lock (links and unlinks, roles and blocks, link
    codes, pairing and access rules, lockouts, provider writes failing and pruned, the
    memory providers' own stores, prunes, dashboard logins) locks what it touches: each
    goes on beside another gateway's write of someone else, and one that touches a
    held key waits for it."""
    ann, bob, zed = (pg.people.ensure_user(new_user_id()).id for _ in range(3))
    pg.people.ensure_identity("slack", "U-bob", bob)
    pg.people.ensure_identity("telegram", "T-bob", bob)
    facts = ServerFactStore.on(pg.engine)
    item = pg.outbox.add("mem0", bob, "sync_turn", {"user": "hi"})
    pg.access.create_link_code(ann)
    pairing = pg.access.request_pairing("slack", "U-new", "New").request
    assert pairing is not None
    writes: dict[str, Callable[[], Any]] = {
        "role": lambda: pg.people.set_role(bob, "admin"),
        "block": lambda: pg.people.set_status(bob, "blocked"),
        "identity": lambda: pg.people.ensure_identity("discord", "D-bob", bob),
        "group chat": lambda: pg.people.chat_user("slack", "C1"),
        "link code": lambda: pg.access.create_link_code(bob),
        "redeem": lambda: pg.access.redeem_link_code("WRONG123", "telegram:9"),
        "lockout": lambda: pg.access.failed({"ip:10.0.0.9": LINK_CODES}),
        "forget": lambda: pg.access.succeeded("ip:10.0.0.9"),
        "stale": lambda: pg.access.forget_stale("ip:", LINK_CODES),
        "pairing": lambda: pg.access.request_pairing("slack", "U-other", "Other"),
        "rule": lambda: pg.access.set_rule(allow("U7")),
        "announce": lambda: pg.access.claim_announcement(pairing.code),
        "provider failed": lambda: pg.outbox.failed(item, "timeout"),
        "provider prune": lambda: pg.outbox.prune(utcnow() + timedelta(days=60)),
        "facts": lambda: fact(facts, bob, "Owns a boat"),
        "prune": lambda: pg.upkeep.prune(30, dry_run=False),
        "dashboard": lambda: pg.dashboard.audit(zed, "looked"),
        "unlink": lambda: pg.people.detach_identity(bob, "slack"),
    }  # fmt: skip
    holder = Holder(pg, [*memory_keys([zed]), f"user:{zed}", "session:elsewhere"])
    try:
        for name, call in writes.items():
            done, _ = started(call)
            assert done.wait(10), f"{name} waited for another person's write"
    finally:
        holder.let_go()
    # each waits for what it touches, held by another gateway
    waits: list[tuple[list[str], Callable[[], Any]]] = [
        ([f"user:{bob}"], lambda: pg.people.set_role(bob, "user")),
        ([memory_keys([bob])[0]], lambda: pg.people.merge_users(ann, bob)),
        (["access"], lambda: pg.access.decide_pairing(pairing.code, True, by=ann)),
        ([f"facts:{ann}"], lambda: fact(facts, ann, "Likes tea")),
    ]  # fmt: skip
    for keys, call in waits:
        holder = Holder(pg, keys)
        try:
            done, _ = started(call)
            assert not done.wait(0.5), f"a write did not wait for {keys}"
        finally:
            holder.let_go()
        assert done.wait(10)
    assert pg.people.get_user(bob) is None  # merged into Ann
    assert pg.people.user_by_identity("telegram", "T-bob") == ann
    assert pg.access.rules()[("slack", "user", "U-new")] == "allow"


def test_a_key_asked_for_inside_a_held_transaction_is_taken_there(pg: SessionDB) -> None:
    """A repository call joining a transaction that holds other keys takes its own key
    in it (not just joins): another writer of that key waits for the whole of it."""
    first, second = reminder(pg, new_user_id()), reminder(pg, new_user_id())
    someone = pg.people.ensure_user(new_user_id()).id
    held, release = threading.Event(), threading.Event()

    def both() -> None:
        def work() -> None:
            pg.reminders.claim(second, "gw1", 4, utcnow())  # joins, taking `second`
            pg.reminders.of_user(None)  # a read joins and takes nothing
            pg.memory_stores.read(someone, "memory")
            held.set()
            release.wait(HOLD_S)

        eng.in_one_transaction(pg.engine, work, pg.patience, keys=[f"reminder:{first}"])

    holding, _ = started(both)
    assert held.wait(10)
    try:
        other, claimed = started(lambda: pg.reminders.claim(second, "gw2", 4, utcnow()))
        assert not other.wait(0.5)
        keyed, _ = started(lambda: pg.conversations.end_session("s-elsewhere", "new"))
        assert keyed.wait(10), "the reads inside took the whole database's lock"
    finally:
        release.set()
    assert holding.wait(10) and other.wait(10)
    assert claimed == [None]  # gw1 had claimed it: never twice


def test_at_once_one_identity_makes_one_person_and_one_prompt_is_kept_once(
    pg: SessionDB,
) -> None:
    """Writes that only lock their own key, or nothing: the first messages of one
    identity, sent to several gateways at once, make one person; sessions starting at
    once with the same prompt keep it once."""
    people = [pg.people.ensure_user(new_user_id()).id for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda _: pg.people.user_for_identity("slack", "U9", "Bo"), range(8)))
        prompt = "You are Hermes." * 50
        sessions = list(
            pool.map(
                lambda who: pg.conversations.start_session(
                    who, "slack", f"k-{who}", system_prompt=prompt
                ),
                people,
            )
        )
    assert len(ids) == 1
    assert len({s.system_prompt_hash for s in sessions}) == 1


@pytest.mark.parametrize("what", ["provider", "identity"])
def test_a_link_waits_for_a_write_about_the_person_it_removes(pg: SessionDB, what: str) -> None:
    """A write about Bob still open in another gateway when Bob's account is linked
    into Ann's (the first write of a provider none of them had used, so no key of it
    was known to lock; Bob's account on another platform being added): the link waits
    for it, then moves it too, instead of leaving it behind under someone removed or
    deleting it with him."""
    ann, bob = (pg.people.ensure_user(new_user_id()).id for _ in range(2))
    held, release = threading.Event(), threading.Event()

    def open_write() -> None:
        if what == "provider":
            pg.outbox.add("brand-new", bob, "sync_turn", {"user": "hi"})
        else:  # Bob's first message on another platform, his account there
            pg.people.ensure_identity("discord", "D-bob", bob)
        held.set()
        release.wait(HOLD_S)

    writer = threading.Thread(
        target=lambda: eng.in_one_transaction(pg.engine, open_write, pg.patience, keys=()),
        daemon=True,
    )
    writer.start()
    assert held.wait(10)
    failed: list[BaseException] = []

    def link() -> None:
        try:
            pg.people.merge_users(ann, bob)
        except Exception as exc:
            failed.append(exc)

    done, _ = started(link)
    try:
        assert not done.wait(0.5), f"the link did not wait for the open write: {failed}"
    finally:
        release.set()
        writer.join(10)
    assert done.wait(10) and not failed, failed
    assert pg.people.get_user(bob) is None
    if what == "provider":
        assert len(pg.outbox.pending("brand-new", ann)) == 1
    else:
        assert pg.people.user_by_identity("discord", "D-bob") == ann
