"""The provider contract over every memory *service* provider, each through the local fake
of its service and its real SDK (tests/providers/services.py): recall injected in the
fence, turns synced, the built-in stores mirrored (add, replace, remove, whole-store
changes), tools, recall modes, a slow service bounded, per-person namespaces never
crossed, a link moving the person's data on the service, an outage kept in the outbox
and replayed in order, the breaker, 429/5xx, setup/status/off/doctor from the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.pipeline.router import Router
from hermes.providers.base import MemoryWrite, ProviderSession
from hermes.providers.host import Breaker, ProviderHost
from hermes.state.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm, scenario
from tests.providers.services import SERVICES, Served, served
from tests.providers.test_delivery import until

ALICE = ProviderSession("s_a", "u_000000000000000a", "cli")
BOB = ProviderSession("s_b", "u_000000000000000b", "cli")
SECRET = "Kestrel vault code 4471 is kept in Lisbon"


def host_for(served: Served, db: SessionDB, home: Path, **options: Any) -> ProviderHost:
    defaults: dict[str, Any] = {
        "retry_after": 0.05,
        "breaker": Breaker(after=3, delays=(0.3, 0.6)),
        "call_timeout": 5.0,
        "prefetch_timeout": 3.0,
    }
    return ProviderHost(served.factory, home=home, outbox=db.outbox, **{**defaults, **options})


def started(host: ProviderHost, *sessions: ProviderSession) -> None:
    for session in sessions:
        host.session_started(session, parent_session_id=None, reason="new")


def count(texts: list[str], fragment: str) -> int:
    """How many things the service keeps hold `fragment` (a service may word a note
    its own way around it: Honcho's conclusions say which store they came from)."""
    return sum(fragment in text for text in texts)


def write(action: str, content: str, before: str | None, who: ProviderSession) -> MemoryWrite:
    return MemoryWrite(action, "user", content, before, who.user_id, "agent", who.session_id)


def test_turns_notes_recall_and_tools_reach_the_persons_own_namespace(
    service: Served, home: Path, db: SessionDB
) -> None:
    async def go() -> dict[str, Any]:
        host = host_for(service, db, home)
        started(host, ALICE)
        host.turn_done(f"remember this: {SECRET}", "Noted.", ALICE, [])
        host.session_ended(ALICE, [])  # some services learn from a session at its end
        host.memory_written(write("add", "Lives in Lisbon", None, ALICE))
        host.memory_written(write("add", "Plays the cello", None, ALICE))
        host.memory_written(write("replace", "Lives in Porto", "Lives in Lisbon", ALICE))
        host.memory_written(write("remove", "", "Plays the cello", ALICE))
        await host.drain(10)
        after_edits = service.kept(ALICE.user_id)
        # a whole-store change (a consolidation): the notes become exactly the store
        store = "Lives in Porto\n§\nHas a sister, Mina"
        host.memory_written(write("consolidate", store, None, ALICE))
        host.memory_written(write("consolidate", store, None, ALICE))  # a replay: no twin
        await host.drain(10)
        after_store = service.kept(ALICE.user_id)
        recalled = await host.recall("where is the vault code kept?", ALICE)
        names = [s["function"]["name"] for s in host.tool_schemas(ALICE.user_id)]
        remembered = await host.call_tool(
            ALICE.user_id, f"{service.name}_remember", {"content": "Allergic to peanuts"}
        )
        searched = await host.call_tool(
            ALICE.user_id, f"{service.name}_search", {"query": "peanuts allergic"}
        )
        status = host.status(ALICE.user_id)
        await host.shutdown(5)
        return {
            "after_edits": after_edits,
            "after_store": after_store,
            "recalled": recalled,
            "names": names,
            "remembered": remembered,
            "searched": searched,
            "status": status,
        }

    got = asyncio.run(go())
    assert any("4471" in text for text in got["after_edits"])  # the turn, synced
    edited = got["after_edits"]
    assert count(edited, "Lives in Porto") == 1 and count(edited, "Lives in Lisbon") == 0
    assert count(edited, "Plays the cello") == 0
    assert count(got["after_store"], "Lives in Porto") == 1
    assert count(got["after_store"], "Has a sister, Mina") == 1
    assert "4471" in got["recalled"]
    assert {f"{service.name}_search", f"{service.name}_remember"} <= set(got["names"])
    assert got["remembered"]["success"] is True
    assert any("peanuts" in text for text in got["searched"]["results"])
    assert got["status"].reachable and got["status"].waiting == 0
    # every request named alice's own namespace, never a platform id or a name
    assert service.fake.requests
    for request in service.fake.requests:
        seen = json.dumps([request.path, request.query, request.body])
        assert "u_000000000000000b" not in seen and "alice" not in seen.lower()


def test_two_people_never_see_each_others_memories(
    service: Served, home: Path, db: SessionDB
) -> None:
    async def go() -> tuple[str, str, list[str]]:
        host = host_for(service, db, home)
        started(host, ALICE, BOB)
        host.turn_done(f"remember: {SECRET}", "noted", ALICE, [])
        host.session_ended(ALICE, [])
        host.memory_written(write("add", SECRET, None, ALICE))
        await host.drain(10)
        await host.call_tool(ALICE.user_id, f"{service.name}_remember", {"content": SECRET})
        found = []
        for schema in host.tool_schemas(BOB.user_id):
            name = schema["function"]["name"]
            if name.endswith("_search"):
                found.append(json.dumps(await host.call_tool(BOB.user_id, name, {"query": SECRET})))
        theirs = await host.recall(f"what is the {SECRET}?", BOB)
        own = await host.recall(f"what is the {SECRET}?", ALICE)
        await host.shutdown(5)
        return theirs, own, found

    theirs, own, found = asyncio.run(go())
    assert "4471" in own
    assert "4471" not in theirs and found and not any("4471" in text for text in found)
    assert service.kept(BOB.user_id) == []
    assert service.space(ALICE.user_id) != service.space(BOB.user_id)


def test_a_link_moves_the_persons_data_on_the_service_even_after_an_outage(
    service: Served, home: Path, db: SessionDB
) -> None:
    """Bob links into Alice while the service is down: the link does not wait; when it
    answers, Bob's memories on the service are Alice's (a note both had, once), and
    Bob's namespace keeps nothing."""

    async def go() -> tuple[str, str, dict[str, Any]]:
        host = host_for(service, db, home)
        started(host, ALICE, BOB)
        both = "Prefers green tea in the morning"
        for who in (ALICE, BOB):
            host.memory_written(write("add", both, None, who))
        host.turn_done(f"remember: {SECRET}", "noted", BOB, [])
        host.session_ended(BOB, [])
        await host.drain(10)
        service.fake.down = True
        host.people_merged(ALICE.user_id, BOB.user_id)  # returns at once
        waiting = host.status(ALICE.user_id).waiting
        service.fake.down = False
        await until(lambda: host.status(ALICE.user_id).waiting == 0)
        await host.drain(10)
        mine = await host.recall(f"what is the {SECRET}?", ALICE)
        await host.shutdown(5)
        return mine, str(waiting), {"alice": service.kept(ALICE.user_id)}

    mine, waiting, kept = asyncio.run(go())
    assert waiting == "1"
    assert "4471" in mine
    assert count(kept["alice"], "Prefers green tea in the morning") == 1
    assert service.kept(BOB.user_id) == []


def test_an_outage_is_kept_and_replayed_in_order_and_the_breaker_leaves_it_alone(
    service: Served, home: Path, db: SessionDB
) -> None:
    async def go() -> tuple[int, int]:
        host = host_for(service, db, home, breaker=Breaker(after=3, delays=(2.0, 4.0)))
        started(host, ALICE)
        await host.drain(10)
        service.fake.down = True
        for n in range(4):
            host.turn_done(f"outage turn number {n} zebra", "ok", ALICE, [])
        await until(lambda: not host.status(ALICE.user_id).reachable)  # the breaker opened
        seen = len(service.fake.requests)
        host.turn_done("outage turn number 4 zebra", "ok", ALICE, [])  # while it is open...
        await host.drain(10)  # ... handled by the worker, which rests without a call
        quiet = len(service.fake.requests) - seen
        waiting = host.status(ALICE.user_id).waiting
        service.fake.down = False
        await until(lambda: host.status(ALICE.user_id).waiting == 0)  # probed, then all
        await host.shutdown(5)
        return waiting, quiet

    waiting, quiet = asyncio.run(go())
    assert waiting == 5 and quiet == 0
    turns = [t for t in service.kept(ALICE.user_id) if "zebra" in t]
    order = [int(t.split("number ")[1][0]) for t in turns]
    assert order == sorted(order) and set(order) == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_refused_call_is_tried_again_and_taken_once(
    service: Served, home: Path, db: SessionDB, status: int
) -> None:
    async def go() -> None:
        host = host_for(service, db, home)
        started(host, ALICE)
        await host.drain(10)
        service.fake.fail(2, status)
        host.memory_written(write("add", "Speaks Portuguese at home", None, ALICE))
        await until(lambda: host.status(ALICE.user_id).waiting == 0)
        await host.shutdown(5)

    asyncio.run(go())
    assert count(service.kept(ALICE.user_id), "Speaks Portuguese at home") == 1


def test_a_slow_service_is_skipped_within_the_prefetch_bound(
    service: Served, home: Path, db: SessionDB
) -> None:
    """With something to recall, a service slower than the prefetch bound gives the turn
    nothing (counted as skipped); answering in time, it gives the memory."""

    async def go() -> tuple[str, int, str]:
        host = host_for(service, db, home, prefetch_timeout=0.2)
        started(host, ALICE)
        remembered = {"content": "My cat is called Miso"}
        await host.call_tool(ALICE.user_id, f"{service.name}_remember", remembered)
        await host.drain(10)
        skipped_before = host.skipped
        service.fake.delay = 1.0
        late = await host.recall("what is my cat called?", ALICE)
        skipped = host.skipped - skipped_before
        service.fake.delay = 0.0
        in_time = await host.recall("what is my cat called?", ALICE)
        await host.shutdown(5)
        return late, skipped, in_time

    late, skipped, in_time = asyncio.run(go())
    assert late == "" and skipped == 1
    assert "Miso" in in_time


@pytest.mark.parametrize("mode", ["context", "tools", "hybrid"])
def test_through_the_app_recall_lands_in_the_fence_and_tools_follow_the_mode(
    service: Served, home: Path, fake_llm: FakeOpenAI, mode: str
) -> None:
    search = f"{service.name}_search"

    def responder(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            return Reply(text="found it")
        offered = [t["function"]["name"] for t in request.get("tools") or []]
        if "cat" in str(last["content"]) and search in offered:
            return Reply.tool_call(search, {"query": "cat called Miso"})
        return Reply(text="ok")

    fake_llm.responder = responder

    async def body(router: Router, adapter: FakeAdapter) -> str:
        await adapter.deliver(dm("alice", "my cat is called Miso"))
        await adapter.wait_for(1)
        await adapter.deliver(dm("alice", "/new"))  # recall is for later sessions
        await adapter.wait_for(2)
        await router.agent.memory.providers.drain(10)
        await adapter.deliver(dm("alice", "what is my cat called?"))
        await adapter.wait_for(3)
        return router.db.people.user_for_identity("fakechat", "alice")

    user_id = scenario(
        home,
        fake_llm,
        body,
        provider=service.factory,
        memory={"recall_mode": mode, "review_interval": 0},
    )
    asked = next(r for r in fake_llm.requests if "what is my cat" in json.dumps(r["messages"]))
    fenced = asked["messages"][-1]["content"]
    assert ("<recalled-memory" in fenced and "Miso" in fenced) is (mode != "tools")
    offered = [t["function"]["name"] for t in asked.get("tools") or []]
    assert (search in offered) is (mode != "context")
    tool_results = [m for r in fake_llm.requests for m in r["messages"] if m["role"] == "tool"]
    assert bool(tool_results) is (mode != "context")
    if tool_results:
        assert "Miso" in tool_results[-1]["content"]
    assert service.kept(user_id)  # the person's namespace is our stable user id's


@pytest.mark.slow
def test_setup_status_doctor_and_off_from_the_cli(
    service: Served, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.harness.cli import hermes

    monkeypatch.setenv("MY_SERVICE_KEY", service.fake.api_key)

    config = home / "config.yaml"
    home.mkdir(parents=True, exist_ok=True)
    config.write_text("# mine, kept\nmemory:\n  review_interval: 0\n")
    listed = json.loads(hermes("memory", "providers", "--json").stdout)
    row = next(r for r in listed if r["name"] == service.name)
    assert row["available"] is False
    for wrong, said in (
        ("base_url=ftp://files.example", "base_url must be an http:// or https:// URL"),
        ("base_url=localhost:8000", "base_url must be an http:// or https:// URL"),
        ("timeout_s=soon", "timeout_s must be a positive number"),
        ("namespace_prefix=my people/", "namespace_prefix may hold"),
    ):
        right = (
            [] if wrong.startswith("base_url") else ["--set", f"base_url={service.fake.base_url}"]
        )
        refused = hermes("memory", "setup", service.name, *right, "--set", wrong)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
        assert "provider:" not in config.read_text()  # nothing written
    done = hermes(
        "memory",
        "setup",
        service.name,
        "--set",
        f"base_url={service.fake.base_url}",
        "--set",
        "api_key_env=MY_SERVICE_KEY",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    written = config.read_text()
    assert "# mine, kept" in written and f"provider: {service.name}" in written
    assert service.fake.api_key not in written
    status = hermes("memory", "status").stdout
    assert f"Provider: {service.name}" in status
    # a one-shot write from the CLI reaches the service before the command exits, and
    # closes its client (Hindsight's left "Unclosed client session" on stderr)
    added = hermes("memory", "add", "Keeps bees on the roof")
    assert added.returncode == 0 and "nclosed" not in added.stderr, added.stderr
    kept = [text for space in list(service.fake.spaces) for text in service.fake.texts(space)]
    assert any("Keeps bees on the roof" in text for text in kept), kept
    # the list checks each provider with what config.yaml sets for it (its key from the
    # environment): the configured one is available, never "no API key"
    listed = json.loads(hermes("memory", "providers", "--json").stdout)
    row = next(r for r in listed if r["name"] == service.name)
    assert row["available"] is True and row["selected"] is True, row
    doctor = json.loads(hermes("doctor", "--json").stdout)
    check = next(c for c in doctor["checks"] if c["name"] == "memory provider")
    assert check["status"] == "ok" and "answering" in check["detail"], check
    service.fake.down = True
    doctor = json.loads(hermes("doctor", "--json").stdout)
    check = next(c for c in doctor["checks"] if c["name"] == "memory provider")
    assert check["status"] == "fail" and "does not answer" in check["detail"], check
    service.fake.down = False
    off = hermes("memory", "off")
    assert off.returncode == 0 and "Provider: built-in only" in hermes("memory", "status").stdout


@pytest.mark.parametrize(
    "which", sorted(n for n, (_, provider) in SERVICES.items() if provider.special_tool)
)
def test_the_tool_a_service_is_known_for_answers_from_the_persons_memories(
    which: str, home: Path, db: SessionDB
) -> None:
    """Honcho's dialectic, Hindsight's reflect, Supermemory's profile: asked about what
    the person said, answered from their namespace alone."""
    with contextlib.closing(served(which)) as running:
        service = next(running)
        special = service.make().special_tool
        assert special is not None
        own, other = _ask_special(service, special, home, db)
    assert own["success"] is True and "hospital" in json.dumps(own)
    assert "hospital" not in json.dumps(other) and "Teo" not in json.dumps(own)


def _ask_special(
    service: Served, special: dict[str, Any], home: Path, db: SessionDB
) -> tuple[dict[str, Any], dict[str, Any]]:
    name = special["function"]["name"]
    argument = next(iter(special["function"]["parameters"]["properties"]))

    async def go() -> tuple[dict[str, Any], dict[str, Any]]:
        host = host_for(service, db, home)
        started(host, ALICE, BOB)
        host.turn_done("my sister Mina works at the hospital", "Noted.", ALICE, [])
        host.turn_done("my brother Teo repairs bicycles", "Noted.", BOB, [])
        for who in (ALICE, BOB):
            host.session_ended(who, [])
        await host.drain(10)
        own = await host.call_tool(ALICE.user_id, name, {argument: "sister Mina hospital"})
        other = await host.call_tool(BOB.user_id, name, {argument: "sister Mina hospital"})
        await host.shutdown(5)
        return own, other

    return asyncio.run(go())


def test_listings_follow_every_page(service: Served, home: Path, db: SessionDB) -> None:
    """130 entries (more than one page of every service's listing): a remove of one
    near the end finds it, and a replay of the whole store adds nothing."""
    entries = [f"Entry number {n:03d} about topic {n}" for n in range(130)]

    async def go() -> None:
        host = host_for(service, db, home, call_timeout=60.0)
        started(host, ALICE)
        store = "\n§\n".join(entries)
        host.memory_written(write("consolidate", store, None, ALICE))
        await host.drain(120)
        host.memory_written(write("remove", "", entries[127], ALICE))
        host.memory_written(
            write("consolidate", "\n§\n".join(entries[:127] + entries[128:]), None, ALICE)
        )
        await host.drain(120)
        await host.shutdown(5)

    asyncio.run(go())
    kept = service.kept(ALICE.user_id)
    assert count(kept, "Entry number") == 129
    assert count(kept, entries[127]) == 0 and count(kept, entries[129]) == 1


def test_a_refused_key_keeps_the_write_and_says_why(
    service: Served, home: Path, db: SessionDB
) -> None:
    async def go() -> Any:
        host = ProviderHost(
            lambda: service.make(api_key="not-the-key"),
            home=home,
            outbox=db.outbox,
            retry_after=0.05,
            breaker=Breaker(after=3, delays=(5.0, 10.0)),
            call_timeout=5.0,
        )
        started(host, ALICE)
        host.memory_written(write("add", "Lives in Lisbon", None, ALICE))
        await until(lambda: not host.status(ALICE.user_id).reachable)
        status = host.status(ALICE.user_id)
        await host.shutdown(1)
        return status

    status = asyncio.run(go())
    assert status.waiting >= 1 and status.last_error
    assert service.kept(ALICE.user_id) == []


def test_a_write_still_waiting_at_a_link_lands_with_the_person_who_stays(
    service: Served, home: Path, db: SessionDB
) -> None:
    """Bob's store entry is waiting (the service is down) when Bob links into Alice: the
    link moves the write to Alice (state.db), the move on the service comes after it,
    and when the service answers the entry is Alice's and Bob's namespace is empty."""
    for who in (ALICE, BOB):
        db.people.ensure_user(who.user_id)

    async def go() -> None:
        host = host_for(service, db, home)
        started(host, ALICE, BOB)
        await host.drain(10)
        service.fake.down = True
        host.memory_written(write("add", "Keeps bees on the roof", None, BOB))
        await until(lambda: not host.status(BOB.user_id).reachable)
        host.people_merged(ALICE.user_id, BOB.user_id)
        db.people.merge_users(ALICE.user_id, BOB.user_id)
        service.fake.down = False
        await until(lambda: host.status(ALICE.user_id, everyone=True).waiting == 0, 20)
        await host.shutdown(5)

    asyncio.run(go())
    assert count(service.kept(ALICE.user_id), "Keeps bees on the roof") == 1
    assert service.kept(BOB.user_id) == []


def test_a_write_moved_by_a_link_is_delivered_to_the_person_it_was_moved_to(
    service: Served, home: Path, db: SessionDB
) -> None:
    """A waiting row that a link moved to Alice still says, in its payload, that Bob
    wrote it: it is delivered into Alice's namespace, not Bob's."""

    async def go() -> None:
        host = host_for(service, db, home)
        started(host, ALICE)
        payload = {
            "action": "add",
            "target": "user",
            "content": "Keeps bees on the roof",
            "metadata": {
                "before": None,
                "actor": "agent",
                "session_id": None,
                "user_id": BOB.user_id,
            },
        }
        assert db.outbox is not None
        db.outbox.add(host.name, ALICE.user_id, "memory_write", payload)
        host.memory_written(write("add", "Plays chess", None, ALICE))  # wakes the worker
        await until(lambda: host.status(ALICE.user_id).waiting == 0)
        await host.shutdown(5)

    asyncio.run(go())
    assert count(service.kept(ALICE.user_id), "Keeps bees on the roof") == 1
    assert service.kept(BOB.user_id) == []


def test_what_each_service_needs_is_said_before_anything_is_called() -> None:
    from hermes.providers.hindsight import HindsightProvider
    from hermes.providers.honcho import HonchoProvider
    from hermes.providers.mem0 import Mem0Provider

    assert "MEM0_API_KEY" in Mem0Provider({}).unavailable_reason()
    assert "base_url not set" in HindsightProvider({}).unavailable_reason()
    assert HindsightProvider({"base_url": "http://127.0.0.1:1"}).is_available()  # no key
    assert "HONCHO_API_KEY" in HonchoProvider({}).unavailable_reason()  # the hosted API
    assert HonchoProvider({"base_url": "http://127.0.0.1:1"}).is_available()  # self-hosted
    edited = HindsightProvider({"base_url": "127.0.0.1:8888"})  # config.yaml by hand
    assert "base_url must be an http:// or https:// URL" in edited.unavailable_reason()
    slow = Mem0Provider({"api_key": "k", "timeout_s": "0"})
    assert "timeout_s must be a positive number" in slow.unavailable_reason()


def test_doctor_passes_a_healthy_mem0_home_run_after_run(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mem0ai makes its folder at import with the process umask (0755): made owner-only
    first, the home's permission check stays green on every later run."""
    from tests.harness.cli import hermes

    with contextlib.closing(served("mem0")) as running:
        service = next(running)
        monkeypatch.setenv("MY_MEM0_KEY", service.fake.api_key)
        monkeypatch.delenv("MEM0_DIR")  # as on a server: its folder under the home
        home.mkdir(mode=0o700, parents=True)
        (home / "config.yaml").write_text("memory:\n  review_interval: 0\n")
        (home / "config.yaml").chmod(0o600)
        done = hermes(
            "memory", "setup", "mem0", "--set", f"base_url={service.fake.base_url}",
            "--set", "api_key_env=MY_MEM0_KEY",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        for _ in range(2):
            checks = json.loads(hermes("doctor", "--json").stdout)["checks"]
            permissions = next(c for c in checks if "permissions" in c["name"])
            assert permissions["status"] == "ok", permissions
    assert (home / "providers" / "mem0").stat().st_mode & 0o077 == 0


def test_a_restarted_gateway_readies_the_service_before_the_first_turn(
    service: Served, home: Path, fake_llm: FakeOpenAI
) -> None:
    """After a restart the provider's client (its SDK imported, the service asked once)
    is made at start, off the event loop, for the people who talked last: the first turn
    no longer pays seconds for it inside the prefetch bound, and gets its recall."""
    from gateway.app import build_app
    from tests.apps import app_config

    fake_llm.responder = lambda request: Reply(text="ok")
    scenario(home, fake_llm, lambda _, adapter: said(adapter, "hello"), provider=service.factory)
    db = SessionDB.open(home)
    try:
        user_id = db.people.user_for_identity("fakechat", "alice")
    finally:
        db.close()
    kept = service.make()
    kept.remember(kept.space(user_id), "My cat is called Miso")
    kept.close()

    async def restarted() -> tuple[int, str]:
        db = SessionDB.open(home)
        app = build_app(home, app_config(fake_llm), db, provider=service.factory)
        before = len(service.fake.requests)
        adapter = FakeAdapter()
        app.router.attach(adapter)
        await adapter.start(app.router.handle)
        app.start_background()
        try:
            await until(lambda: len(service.fake.requests) > before)  # readied, no turn yet
            warmed = len(service.fake.requests) - before
            await adapter.deliver(dm("alice", "what is my cat called?"))
            await adapter.wait_for(1)
        finally:
            await app.router.stop()
            await app.close()
            db.close()
        asked = next(r for r in fake_llm.requests if "what is my cat" in json.dumps(r["messages"]))
        return warmed, asked["messages"][-1]["content"]

    warmed, prompt = asyncio.run(restarted())
    assert warmed >= 1
    assert "<recalled-memory" in prompt and "Miso" in prompt, prompt


async def said(adapter: FakeAdapter, text: str) -> None:
    await adapter.deliver(dm("alice", text))
    await adapter.wait_for(1)
