"""Writes for a memory provider survive its outages: kept in state.db's outbox, delivered
in order per person when the service answers again (also after a restart), the service
left alone while it keeps failing (the breaker), and said so in the status."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.commands.memory import provider_line
from gateway.config import HermesConfig
from gateway.ops.doctor import check_provider
from hermes.providers.base import BaseProvider, MemoryWrite, ProviderSession
from hermes.providers.host import Breaker, ProviderHost
from hermes.state.db import SessionDB

ALICE = ProviderSession("s_a", "u_000000000000000a", "cli")
BOB = ProviderSession("s_b", "u_000000000000000b", "cli")


class Service:
    """The provider's remote side: up or down, and what it took, in order."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0  # every call that reached it, taken or not
        self.taken: list[tuple[str, str, Any]] = []


class Flaky(BaseProvider):
    name = "flaky"

    def __init__(self, service: Service) -> None:
        super().__init__({})
        self.service = service

    def _reach(self, what: str, value: Any) -> None:
        self.service.calls += 1
        if self.service.down:
            raise ConnectionError("HTTP 503 from the service")
        self.service.taken.append((self.user_id, what, value))

    async def prefetch(self, query: str, *, session_id: str) -> str:
        self._reach("prefetch", query)
        return "recalled"

    async def sync_turn(
        self, user_text: str, assistant_text: str, *, session_id: str, messages: list[Any]
    ) -> None:
        self._reach("sync", (user_text, len(messages)))

    def on_memory_write(
        self, action: str, target: str, content: str, *, metadata: dict[str, Any]
    ) -> None:
        self._reach("mirror", (action, content, metadata["actor"]))

    async def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        self._reach("end", len(messages))


def host_for(
    service: Service, home: Path, db: SessionDB, name: str = "gw1", open_s: float = 0.3
) -> ProviderHost:
    return ProviderHost(
        lambda: Flaky(service),
        home=home,
        outbox=db.outbox,
        deliverer=name,
        retry_after=0.05,
        breaker=Breaker(after=3, delays=(open_s, 2 * open_s)),
        call_timeout=1.0,
    )


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait for what the host reports (not for a time): fail if it never comes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "the host never got there"
        await asyncio.sleep(0.02)


def taken(service: Service, user: str, what: str = "sync") -> list[Any]:
    return [value for who, kind, value in service.taken if who == user and kind == what]


def test_an_outage_loses_nothing_and_the_writes_arrive_in_order(
    home: Path, db: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    service = Service()
    caplog.set_level(logging.INFO, "hermes.providers.host")

    async def go() -> tuple[Any, Any, str, int]:
        host = host_for(service, home, db, open_s=4.0)  # what follows fits in it, loaded
        service.down = True
        for n in range(4):
            host.turn_done(f"turn {n}", "ok", ALICE, [{"role": "user", "content": f"turn {n}"}])
        host.memory_written(
            MemoryWrite("add", "user", "Lives in Lisbon", None, ALICE.user_id, "agent")
        )
        host.turn_done("bob's turn", "ok", BOB, [])
        await until(lambda: not host.status(ALICE.user_id).reachable)  # failures in a row
        await host.drain(5)  # a call that passed the breaker before it opened has ended
        down = host.status(ALICE.user_id)
        everyone = host.status(ALICE.user_id, everyone=True)
        calls_while_open = service.calls
        host.turn_done("turn 4", "ok", ALICE, [])  # written while it is open (4 s) ...
        await host.drain(5)  # ... and handled by the worker, which rests without a call
        skipped = await host.recall("what do you know about me?", ALICE)  # not asked
        assert service.calls == calls_while_open  # left alone while open
        service.down = False
        await until(lambda: host.status(ALICE.user_id).waiting == 0)  # probed, then all
        up = host.status(ALICE.user_id)
        await host.shutdown(5)
        assert everyone.waiting == 6  # an operator's view: Bob's write too
        return down, up, skipped, calls_while_open

    down, up, skipped, calls = asyncio.run(go())
    assert taken(service, ALICE.user_id) == [(f"turn {n}", 1) for n in range(4)] + [("turn 4", 0)]
    assert taken(service, ALICE.user_id, "mirror") == [("add", "Lives in Lisbon", "agent")]
    assert taken(service, BOB.user_id) == [("bob's turn", 0)]
    kinds = [k for who, k, _ in service.taken if who == ALICE.user_id]
    assert kinds == ["sync"] * 4 + ["mirror", "sync"]  # in the order written
    # a person's status counts their own writes only (4 turns, 1 mirror), never Bob's
    assert not down.reachable and down.waiting == 5 and "HTTP 503" in down.last_error
    assert skipped == "" and calls <= 6  # a handful of tries, not a hammering
    assert up.reachable and up.waiting == 0 and up.last_error == ""
    assert "keeps failing" in caplog.text and "answers again" in caplog.text
    assert db.outbox.status("flaky").waiting == 0
    line = provider_line(down)
    assert "not answering" in line and "5 writes waiting" in line and "HTTP 503" in line


def test_writes_left_at_shutdown_are_delivered_after_a_restart(home: Path, db: SessionDB) -> None:
    service = Service()

    async def before() -> None:
        host = host_for(service, home, db)
        service.down = True
        host.turn_done("first", "1", ALICE, [])
        host.turn_done("second", "2", ALICE, [])
        host.session_ended(ALICE, [{"role": "user", "content": "x"}] * 3)
        await asyncio.sleep(0.2)
        await host.shutdown(1)  # the service is still down: they stay in the database

    async def after() -> None:
        host = host_for(service, home, db, name="gw-restarted")
        service.down = False
        await host.resume()  # what the gateway does at start, before anyone speaks
        await until(lambda: db.outbox.status("flaky").waiting == 0)
        await host.shutdown(5)

    asyncio.run(before())
    assert db.outbox.status("flaky").waiting == 3 and service.taken == []
    asyncio.run(after())
    assert taken(service, ALICE.user_id) == [("first", 0), ("second", 0)]
    assert taken(service, ALICE.user_id, "end") == [3]
    assert db.outbox.status("flaky").waiting == 0


def test_a_write_from_a_command_without_a_loop_is_kept_when_the_service_is_down(
    home: Path, db: SessionDB
) -> None:
    """`hermes memory add` mirrors at once when it can; else the gateway delivers it."""
    service = Service()
    host = host_for(service, home, db)
    write = MemoryWrite("add", "memory", "Prefers tea", None, ALICE.user_id, "cli")
    host.memory_written(write)
    assert taken(service, ALICE.user_id, "mirror") == [("add", "Prefers tea", "cli")]
    service.down = True
    host.memory_written(MemoryWrite("remove", "memory", "", "Prefers tea", ALICE.user_id, "cli"))
    assert db.outbox.status("flaky").waiting == 1


def test_doctor_names_writes_waiting_and_the_last_error(
    home: Path, db: SessionDB, database_url: str | None
) -> None:
    config = HermesConfig.model_validate(
        {"memory": {"provider": "holographic"}, "database": {"url": database_url}}
    )
    assert check_provider(home, config, {}).status == "ok"
    db.outbox.add("holographic", ALICE.user_id, "sync_turn", {"user": "hi"})
    found = check_provider(home, config, {})
    assert found.status == "ok" and "1 write(s) waiting to be delivered" in found.detail
    [item] = [db.outbox.claim("holographic", ALICE.user_id, "gw1", timedelta(seconds=5))]
    assert item is not None
    db.outbox.failed(item.id, "ConnectionError: refused")
    found = check_provider(home, config, {})
    assert found.status == "fail" and "last error: ConnectionError: refused" in found.detail
    assert "hermes memory status" in found.fix


class Slow(Flaky):
    """A provider kept in this home (merged inside the link), whose writes take a while."""

    name = "slow"

    async def sync_turn(
        self, user_text: str, assistant_text: str, *, session_id: str, messages: list[Any]
    ) -> None:
        await asyncio.sleep(0.6)
        self._reach("sync", (user_text, len(messages)))

    def merge_people(self, keep: str, gone: str, hermes_home: Path) -> None:
        self.service.taken = [
            (keep if who == gone else who, kind, value) for who, kind, value in self.service.taken
        ]
        self.service.taken.append((keep, "merged", gone))


def test_a_link_waits_for_a_write_of_the_person_in_flight_before_moving_their_data(
    home: Path, db: SessionDB
) -> None:
    """Bob's turn is at the provider when Bob is linked into Alice: the provider moves
    Bob's data only once it has landed, so nothing is left under Bob."""
    service = Service()

    async def go() -> None:
        host = ProviderHost(
            lambda: Slow(service), home=home, outbox=db.outbox, deliverer="gw1", call_timeout=3.0
        )
        host.turn_done("my bike is blue", "noted", BOB, [])
        await until(lambda: db.outbox.in_flight("slow", BOB.user_id))
        await asyncio.to_thread(host.people_merged, ALICE.user_id, BOB.user_id)  # as a link
        await host.shutdown(5)

    asyncio.run(go())
    assert [who for who, _, _ in service.taken] == [ALICE.user_id, ALICE.user_id]
    assert [kind for _, kind, _ in service.taken] == ["sync", "merged"]


def test_a_delivery_after_the_turn_does_not_carry_the_turns_id(
    home: Path, db: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    """The person's delivery worker is started by a turn but outlives it: its log lines
    (a failed delivery here) carry no turn id, or every later delivery would be told as
    part of that first turn."""
    from gateway import logs

    service = Service()
    service.down = True
    caplog.set_level(logging.WARNING, "hermes.providers.host")
    tag = logs.TurnTag()

    async def go() -> str:
        host = host_for(service, home, db)
        with logs.turn() as turn_id:  # the turn that makes the worker
            host.turn_done("hello", "ok", ALICE, [])
        await until(lambda: "failed" in caplog.text)
        await host.shutdown(5)
        return turn_id

    logger = logging.getLogger("hermes.providers.host")
    logger.addFilter(tag)
    try:
        turn_id = asyncio.run(go())
    finally:
        logger.removeFilter(tag)
    failed = [r for r in caplog.records if "failed" in r.getMessage()]
    assert failed and all(r.__dict__.get("turn") != turn_id for r in failed)
