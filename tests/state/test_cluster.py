"""The rows that coordinate several gateways (hermes/state/cluster.py), on PostgreSQL:
events acted on once, leases that expire, each session's queue in sent order, a dead
holder's rows taken over and marked, wake-ups by NOTIFY."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes.memory.gate import database_gate
from hermes.memory.store import StoreBusyError
from hermes.state.cluster import INBOX_CHANNEL, STOP_CHANNEL, ClusterDB, Enqueued
from hermes.state.db import SessionDB

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)

TTL = 30.0


@pytest.fixture
def cluster(db: SessionDB) -> ClusterDB:
    return db.cluster


@pytest.fixture
def second(home: Path, database_url: str) -> Iterator[ClusterDB]:
    """The same database through a second engine (another gateway's pool)."""
    other = SessionDB.open(home / "other", database_url)
    yield other.cluster
    other.close()


def event(text: str) -> dict[str, str]:
    return {"text": text}


def put(
    target: ClusterDB,
    me: str,
    key: str,
    sent_at: float,
    text: str,
    *,
    ttl: float = TTL,
    platform: str = "telegram",
) -> Enqueued:
    queued = target.enqueue(
        me,
        key,
        platform=platform,
        ids=[f"e:{key}:{sent_at}", f"m:{key}:{sent_at}"],
        sent_at=sent_at,
        event=event(text),
        ttl=ttl,
    )
    assert queued is not None
    return queued


def test_an_event_is_acted_on_once_however_many_deliveries_race(
    cluster: ClusterDB, second: ClusterDB
) -> None:
    """Twenty deliveries of one event at once, through two pools: exactly one is new.
    A copy that repeats only the message id (Slack's app_mention beside its message
    event) is a duplicate too."""
    start = threading.Barrier(20)
    results: list[bool] = []

    def deliver(index: int) -> None:
        target = cluster if index % 2 else second
        start.wait()
        results.append(target.seen("telegram", ["e:501", "m:42:7"]))

    threads = [threading.Thread(target=deliver, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 19 + [True]
    assert cluster.seen("slack", ["e:B", "m:C1:1.5"])  # new: another platform
    assert not cluster.seen("slack", ["e:C", "m:C1:1.5"])  # another delivery id, same message
    assert cluster.prune(days=0) >= 4  # every id above is older than 0 days
    assert cluster.seen("telegram", ["e:501", "m:42:7"])  # forgotten: new again


def test_a_lease_is_held_by_one_until_it_expires_or_is_released(
    cluster: ClusterDB, second: ClusterDB
) -> None:
    assert cluster.acquire("leader", "gw-a", TTL)
    assert not second.acquire("leader", "gw-b", TTL)
    assert cluster.acquire("leader", "gw-a", TTL)  # kept by its holder
    assert second.holder("leader") == "gw-a"
    cluster.release("leader", "gw-b")  # not the holder: nothing happens
    assert second.holder("leader") == "gw-a"
    cluster.release("leader", "gw-a")
    assert second.holder("leader") is None and second.acquire("leader", "gw-b", 0.3)
    time.sleep(0.5)  # gw-b stalled: its lease expires
    assert cluster.holder("leader") is None
    assert second.renew("gw-b", 0.3, {}) == {"leader"}  # late, but nobody took it: still its
    time.sleep(0.5)
    assert cluster.acquire("leader", "gw-a", TTL) and cluster.holder("leader") == "gw-a"
    assert second.renew("gw-b", TTL, {}) == set()  # taken by another: lost


def test_many_instances_racing_for_one_lease_give_it_to_one(
    cluster: ClusterDB, second: ClusterDB
) -> None:
    start = threading.Barrier(12)
    won: list[str] = []

    def race(index: int) -> None:
        target = cluster if index % 2 else second
        start.wait()
        if target.acquire("platform:discord", f"gw-{index}", TTL):
            won.append(f"gw-{index}")

    threads = [threading.Thread(target=race, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and cluster.holder("platform:discord") == won[0]


def test_an_event_is_recorded_in_the_statement_that_queues_it(
    cluster: ClusterDB, second: ClusterDB
) -> None:
    """The same delivery queued at two instances (or redelivered) is queued once; a copy
    with only the message's id in common (Slack's app_mention beside its message) too;
    and nothing is recorded unless the row is queued: an instance that dies before its
    statement leaves the redelivery to be taken."""

    def queue(target: ClusterDB, me: str, ids: list[str]) -> Enqueued | None:
        return target.enqueue(
            me, "sl:dm:U9", platform="slack", ids=ids, sent_at=1.0, event=event("x"), ttl=TTL
        )

    first = queue(cluster, "gw-a", ["e:Ev1", "m:D9:1.0"])
    assert first is not None and first.held
    assert queue(second, "gw-b", ["e:Ev1", "m:D9:1.0"]) is None  # the same push elsewhere
    assert queue(second, "gw-b", ["e:Ev2", "m:D9:1.0"]) is None  # the app_mention copy
    assert cluster.waiting() == 1
    assert cluster.seen("slack", ["e:Ev3", "m:D9:2.0"])  # a button press: recorded alone
    assert queue(second, "gw-b", ["e:Ev3", "m:D9:2.0"]) is None


def test_the_holder_works_a_sessions_queue_in_sent_order_and_frees_it_when_empty(
    cluster: ClusterDB, second: ClusterDB
) -> None:
    first = put(cluster, "gw-a", "tg:dm:42", 10.0, "one")
    assert first.held and first.waiting == 0
    later = put(second, "gw-b", "tg:dm:42", 12.0, "three")
    earlier = put(second, "gw-b", "tg:dm:42", 11.0, "two")
    assert not later.held and not earlier.held  # gw-a holds the session
    assert second.claim("gw-b", "tg:dm:42", TTL) == []  # not gw-b's to take
    waiting, freed = cluster.finish("gw-a", "tg:dm:42", [first.id], release=True)
    assert (waiting, freed) == (2, False)  # rows wait: the lease stays
    taken = cluster.claim("gw-a", "tg:dm:42", TTL)
    assert [q.event["text"] for q in taken] == ["two", "three"]
    assert not any(q.interrupted for q in taken)
    assert cluster.finish("gw-a", "tg:dm:42", [q.id for q in taken], release=True) == (0, True)
    assert second.holder("session:tg:dm:42") is None
    assert cluster.waiting() == 0
    other = put(second, "gw-b", "tg:dm:42", 13.0, "four")
    assert other.held  # free again: the next message's instance takes it
    assert first.prior is None and other.prior == "gw-a"  # gw-b reads the session again
    assert second.renew("gw-a", TTL, {}) == set()  # a released lease is not renewed


def test_a_dead_holders_rows_are_taken_over_after_its_lease_expires_and_marked(
    cluster: ClusterDB, second: ClusterDB
) -> None:
    cluster.register("gw-a", "host-a", 1, {})
    taken = put(cluster, "gw-a", "sl:dm:U1", 1.0, "mid-turn", ttl=0.3, platform="slack")
    waiting = put(second, "gw-b", "sl:dm:U1", 2.0, "behind it", platform="slack")
    assert taken.held and not waiting.held
    assert second.orphaned("gw-b", ["slack"]) == []  # gw-a is alive (its lease holds)
    time.sleep(0.5)  # gw-a was killed: no heartbeat renews its lease
    assert second.orphaned("gw-b", ["telegram"]) == []  # not a platform gw-b has
    assert second.orphaned("gw-b", ["slack"]) == ["sl:dm:U1"]
    rows = second.claim("gw-b", "sl:dm:U1", TTL)
    assert [(q.event["text"], q.interrupted) for q in rows] == [
        ("mid-turn", True),
        ("behind it", False),
    ]
    assert not cluster.finish("gw-a", "sl:dm:U1", [taken.id], release=True)[1]
    assert cluster.waiting() == 2  # the dead holder's late finish removes nothing of gw-b's


def test_a_clean_stop_hands_its_unworked_rows_back_and_frees_its_leases(
    cluster: ClusterDB, second: ClusterDB
) -> None:
    cluster.register("gw-a", "host-a", 1, {"http": "127.0.0.1:1"})
    second.register("gw-b", "host-b", 2, {})
    row = put(cluster, "gw-a", "dc:dm:9", 1.0, "queued here", platform="discord")
    assert row.held and cluster.acquire("leader", "gw-a", TTL)
    assert [i.id for i in second.instances(TTL) if i.alive] == ["gw-a", "gw-b"]
    assert second.others_alive("gw-b", TTL) == ["gw-a"]
    listed = {i.id: i for i in second.instances(TTL)}
    assert listed["gw-a"].leases == ("leader", "session:dc:dm:9")
    assert listed["gw-a"].info == {"http": "127.0.0.1:1"}
    cluster.retire("gw-a")
    assert second.holder("leader") is None and second.others_alive("gw-b", TTL) == []
    assert second.orphaned("gw-b", ["discord"]) == ["dc:dm:9"]
    [back] = second.claim("gw-b", "dc:dm:9", TTL)
    assert back.interrupted and back.event == event("queued here")
    assert {i.id: i.alive for i in second.instances(TTL)} == {"gw-a": False, "gw-b": True}


def test_renewing_extends_every_lease_of_the_holder_and_stamps_its_heartbeat(
    cluster: ClusterDB,
) -> None:
    cluster.register("gw-a", "host-a", 1, {})
    before = cluster.instances(TTL)[0].heartbeat_at
    assert cluster.acquire("leader", "gw-a", 0.4)
    put(cluster, "gw-a", "k1", 1.0, "x", ttl=0.4)
    time.sleep(0.2)
    assert cluster.renew("gw-a", TTL, {"platforms": {"telegram": "connected"}}) == {
        "leader",
        "session:k1",
    }
    time.sleep(0.4)  # past the first expiry: still held
    assert cluster.holder("leader") == "gw-a" and cluster.holder("session:k1") == "gw-a"
    [me] = cluster.instances(TTL)
    assert me.heartbeat_at > before and me.info == {"platforms": {"telegram": "connected"}}


def test_the_holder_is_woken_by_notify_and_a_stop_reaches_the_holder(
    cluster: ClusterDB, second: ClusterDB
) -> None:
    async def body() -> list[tuple[str, str]]:
        got: list[tuple[str, str]] = []
        listening = asyncio.Event()

        async def listen() -> None:
            notes = cluster.notifications([INBOX_CHANNEL, STOP_CHANNEL], listening)
            async with contextlib.aclosing(notes):
                async for note in notes:
                    got.append(note)
                    if len(got) == 2:
                        return

        task = asyncio.create_task(listen())
        await asyncio.wait_for(listening.wait(), 10)
        assert await asyncio.to_thread(cluster.stop_turn, "nobody") is None  # no holder
        await asyncio.to_thread(put, cluster, "gw-a", "k", 1.0, "a")
        await asyncio.to_thread(put, second, "gw-b", "k", 2.0, "b")
        holder = await asyncio.to_thread(second.stop_turn, "k")
        assert holder == "gw-a"
        await asyncio.wait_for(task, 10)
        return got

    assert asyncio.run(body()) == [(INBOX_CHANNEL, "gw-a k"), (STOP_CHANNEL, "gw-a k")]


def test_the_memory_gate_in_the_database_holds_across_processes_pools(
    db: SessionDB, second: ClusterDB, home: Path, database_url: str
) -> None:
    """A person's writes share their gate, a merge holds its two people's alone
    (hermes/memory/gate.py); with the stores on PostgreSQL these are advisory locks
    there, so they hold between gateways on different machines: here two engines (two
    pools). Everyone else's writes and merges go on meanwhile."""
    other = SessionDB.open(home / "third", database_url)
    ann, bo, cy = "u_00000000000000a1", "u_00000000000000b2", "u_00000000000000c3"
    try:
        with database_gate(db.memory_stores, [ann]), database_gate(other.memory_stores, [ann]):
            pass  # two writers at once
        with database_gate(db.memory_stores, [ann, bo], exclusive=True):  # ann and bo link
            with (
                pytest.raises(StoreBusyError, match="busy with a merge"),
                database_gate(other.memory_stores, [bo], timeout=0.3),
            ):
                pass
            with database_gate(other.memory_stores, [cy], timeout=0.3):
                pass  # someone else's write goes on
            with (
                pytest.raises(StoreBusyError, match="another change of memory"),
                database_gate(other.memory_stores, [cy, ann], exclusive=True, timeout=0.3),
            ):
                pass
        with (
            database_gate(db.memory_stores, [ann]),
            pytest.raises(StoreBusyError, match="another change of memory"),
            database_gate(other.memory_stores, [ann], exclusive=True, timeout=0.3),
        ):
            pass
        with database_gate(other.memory_stores, [ann, bo], exclusive=True):
            pass  # free again once the holders ended
    finally:
        other.close()


def test_a_dropped_connection_is_retried_once_not_checked_before_every_statement(
    cluster: ClusterDB, db: SessionDB
) -> None:
    """The hot path's statements go without a check before each (a round trip each):
    a connection the server dropped (a restart, a failover) is noticed by its first
    statement, which runs again on a new one."""
    assert cluster.seen("telegram", ["e:1", "m:1"])
    with db.engine.connect() as conn:  # the server ends every other connection
        conn.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        conn.commit()
    assert cluster.seen("telegram", ["e:2", "m:2"])  # retried on a fresh connection
    assert not cluster.seen("telegram", ["e:2", "m:2"])
