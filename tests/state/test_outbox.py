"""The external providers' outbox: writes kept until delivered, in order per person, one
deliverer per person at a time (also across processes), bounded in count, age and size,
what was given up counted; a link moves a person's waiting writes."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from hermes.state.db import SessionDB
from hermes.state.models import utcnow
from hermes.state.outbox import MAX_AGE, MAX_ATTEMPTS, MAX_ROWS, PayloadTooLargeError

WORKER = str(Path(__file__).with_name("db_worker.py"))
LEASE = timedelta(seconds=30)


def test_writes_are_delivered_in_order_per_person(db: SessionDB, alice: str, bob: str) -> None:
    for n in range(3):
        db.outbox.add("mem0", alice, "sync_turn", {"n": n, "text": "é ✓ 日本"})
    db.outbox.add("mem0", bob, "memory_write", {"n": 0})
    db.outbox.add("honcho", alice, "session_end", {"n": 9})  # another provider: its own line
    assert db.outbox.waiting("mem0") == sorted([alice, bob])
    seen = []
    while (item := db.outbox.claim("mem0", alice, "gw1", LEASE)) is not None:
        seen.append(item.payload["n"])
        assert item.payload["text"] == "é ✓ 日本" and item.kind == "sync_turn"
        db.outbox.done(item.id)
    assert seen == [0, 1, 2]
    assert db.outbox.waiting("mem0") == [bob] and db.outbox.waiting("honcho") == [alice]


def test_a_failed_write_stays_first_and_its_lease_ends(db: SessionDB, alice: str) -> None:
    first = db.outbox.add("mem0", alice, "sync_turn", {"n": 1})
    db.outbox.add("mem0", alice, "sync_turn", {"n": 2})
    item = db.outbox.claim("mem0", alice, "gw1", LEASE)
    assert item is not None and item.id == first and item.attempts == 0
    assert db.outbox.claim("mem0", alice, "gw2", LEASE) is None  # gw1 holds alice
    db.outbox.failed(first, "HTTP 503 from the service " + "x" * 1000)
    again = db.outbox.claim("mem0", alice, "gw2", LEASE)  # the lease ended with the failure
    assert again is not None and again.id == first and again.attempts == 1
    status = db.outbox.status("mem0")
    assert status.waiting == 2 and status.people == 1 and status.oldest is not None
    assert status.last_error.startswith("HTTP 503") and len(status.last_error) == 500


def test_a_lease_of_a_deliverer_that_died_runs_out(db: SessionDB, alice: str) -> None:
    db.outbox.add("mem0", alice, "sync_turn", {"n": 1})
    # long enough that a busy machine does not let it run out before the second claim
    assert db.outbox.claim("mem0", alice, "dead", timedelta(seconds=1.5)) is not None
    assert db.outbox.claim("mem0", alice, "gw2", LEASE) is None
    deadline = time.monotonic() + 10
    while (item := db.outbox.claim("mem0", alice, "gw2", LEASE)) is None:  # till it runs out
        assert time.monotonic() < deadline, "the dead deliverer's lease never ran out"
        time.sleep(0.05)
    assert item.payload == {"n": 1}


def test_the_outbox_is_bounded_and_says_what_it_gave_up(db: SessionDB, alice: str) -> None:
    with pytest.raises(PayloadTooLargeError):
        db.outbox.add("mem0", alice, "sync_turn", {"text": "x" * 300_000})
    with pytest.raises(ValueError, match="unknown"):
        db.outbox.add("mem0", alice, "delete_everything", {})
    for n in range(MAX_ROWS + 3):
        db.outbox.add("mem0", alice, "sync_turn", {"n": n})
    pending = db.outbox.pending("mem0", alice)
    assert len(pending) == MAX_ROWS and pending[0].payload == {"n": 3}  # the oldest went
    status = db.outbox.status("mem0", alice)
    assert status.dropped == 3 and "over 1,000 waiting" in status.drop_reason
    assert db.outbox.prune() == 0  # nothing is old yet
    assert db.outbox.prune(utcnow() + MAX_AGE + timedelta(hours=1)) == MAX_ROWS
    status = db.outbox.status("mem0")
    assert status.waiting == 0 and status.dropped == MAX_ROWS + 3
    assert status.drop_reason == "older than 14 days" and status.last_dropped is not None


def test_a_link_moves_the_waiting_writes_to_the_person_who_stays(
    db: SessionDB, alice: str, bob: str
) -> None:
    db.outbox.add("mem0", alice, "sync_turn", {"n": 1})
    db.outbox.add("mem0", bob, "sync_turn", {"n": 2})
    db.outbox.add("mem0", alice, "sync_turn", {"n": 3})
    db.people.merge_users(alice, bob)
    assert db.outbox.waiting("mem0") == [alice]
    assert [i.payload["n"] for i in db.outbox.pending("mem0", alice)] == [1, 2, 3]


def test_a_write_in_flight_at_a_link_is_done_before_the_links_own_move(
    db: SessionDB, alice: str, bob: str
) -> None:
    """One gateway delivers for both: bob's write is at the service (to bob's namespace)
    when bob is linked into alice. The service must not move bob's namespace to alice's
    until that write is done, or it lands in a namespace already moved."""
    db.outbox.add("mem0", alice, "sync_turn", {"n": 1})
    in_flight = db.outbox.claim("mem0", bob, "gw1", LEASE)
    assert in_flight is None  # nothing of bob's yet
    db.outbox.add("mem0", bob, "sync_turn", {"n": 2})
    in_flight = db.outbox.claim("mem0", bob, "gw1", LEASE)
    assert in_flight is not None
    db.outbox.add("mem0", alice, "merge_people", {"keep": alice, "gone": bob})  # the link:
    db.people.merge_users(alice, bob)  # the provider's move first, then state.db's
    assert db.outbox.claim("mem0", alice, "gw1", LEASE) is None  # the same gateway waits
    assert db.outbox.claim("mem0", alice, "gw2", LEASE) is None  # and so does another
    db.outbox.done(in_flight.id)
    delivered = []
    while (item := db.outbox.claim("mem0", alice, "gw1", LEASE)) is not None:
        delivered.append(item.kind)
        db.outbox.done(item.id)
    assert delivered == ["sync_turn", "merge_people"]


def test_a_write_that_failed_in_flight_at_a_link_goes_again_before_the_move(
    db: SessionDB, alice: str, bob: str
) -> None:
    db.outbox.add("mem0", bob, "sync_turn", {"n": 2})
    in_flight = db.outbox.claim("mem0", bob, "gw1", LEASE)
    assert in_flight is not None
    db.outbox.add("mem0", alice, "merge_people", {"keep": alice, "gone": bob})
    db.people.merge_users(alice, bob)
    db.outbox.failed(in_flight.id, "HTTP 503")
    again = db.outbox.claim("mem0", alice, "gw1", LEASE)  # now alice's, so to alice's space
    assert again is not None and again.id == in_flight.id and again.user_id == alice
    assert again.attempts == 1


def test_a_link_counts_what_was_given_up_for_the_person_who_is_gone_as_theirs(
    db: SessionDB, alice: str, bob: str
) -> None:
    for person, n in ((alice, 1), (bob, 2), (bob, 3)):
        db.outbox.add("mem0", person, "sync_turn", {"n": n})
    db.outbox.add("honcho", bob, "sync_turn", {"n": 4})
    db.outbox.prune(now=utcnow() + MAX_AGE + timedelta(days=1))  # all given up
    db.people.merge_users(alice, bob)
    mem0, honcho = db.outbox.status("mem0", alice), db.outbox.status("honcho", alice)
    assert (mem0.dropped, honcho.dropped) == (3, 1)
    assert mem0.drop_reason == "older than 14 days" and mem0.last_dropped is not None
    assert db.outbox.status("mem0", bob).dropped == 0
    assert db.outbox.status("mem0").dropped == 3  # everyone's: counted once


def test_two_processes_never_deliver_one_persons_writes_at_once(
    db: SessionDB, alice: str, bob: str, home: Path, database_url: str | None
) -> None:
    for n in range(30):
        db.outbox.add("fake", alice, "sync_turn", {"n": n})
        db.outbox.add("fake", bob, "sync_turn", {"n": n})
    where = database_url or str(home / "state.db")
    workers = [
        subprocess.Popen(
            [sys.executable, WORKER, "deliver", where, f"{alice},{bob}", name, "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("gw1", "gw2")
    ]
    rows = []
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        rows += [line.split() for line in out.splitlines()]
    for user in (alice, bob):
        mine = sorted((float(r[2]), float(r[3]), int(r[4])) for r in rows if r[1] == user)
        assert [n for _, _, n in mine] == list(range(30))  # each once, in order
        for (_, end, _), (start, _, _) in itertools.pairwise(mine):
            assert start >= end  # never two deliveries of one person at once
    assert db.outbox.status("fake").waiting == 0


def test_a_write_refused_for_good_is_given_up_so_later_ones_go_through(
    db: SessionDB, alice: str
) -> None:
    poison = db.outbox.add("mem0", alice, "memory_write", {"content": "bad"})
    db.outbox.add("mem0", alice, "sync_turn", {"n": 2})
    for attempt in range(MAX_ATTEMPTS):
        item = db.outbox.claim("mem0", alice, "gw1", LEASE)
        assert item is not None and item.id == poison and item.attempts == attempt
        kept = db.outbox.failed(item.id, "HTTP 422: invalid memory")
        assert kept == (attempt < MAX_ATTEMPTS - 1)
    item = db.outbox.claim("mem0", alice, "gw1", LEASE)
    assert item is not None and item.payload == {"n": 2}
    status = db.outbox.status("mem0", alice)
    assert (
        status.dropped == 1 and status.drop_reason == "refused 50 times: HTTP 422: invalid memory"
    )
