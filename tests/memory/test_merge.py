"""Merging two people's stores when they link: union, nothing dropped, traced, undoable;
what does not fit waits and consolidation folds it in."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.admission.people import People
from gateway.config import HermesConfig
from hermes.config import MemoryConfig
from hermes.llm.client import LLMClient
from hermes.llm.endpoint import Endpoint
from hermes.memory.consolidation import consolidate
from hermes.memory.merge import MergeError, merge_memory
from hermes.memory.service import MemoryService
from hermes.memory.store import Target
from hermes.memory.undo import undo_last
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from hermes.state.people import PeopleDB
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.memory.stores import seed


@pytest.fixture(autouse=True)
def config(memory_backend: str) -> Iterator[None]:
    """Every test here on both backends: the stores' files with SQLite, rows with
    PostgreSQL (CONFIG is set for the test that runs)."""
    global CONFIG
    CONFIG = MemoryConfig(memory_char_limit=300, user_char_limit=200, backend=memory_backend)
    yield


CONFIG = MemoryConfig()


def person(home: Path, db: SessionDB, platform: str, ident: str, memory: list[str]) -> str:
    user = db.people.user_for_identity(platform, ident)
    if memory:
        seed(UserMemory(home, user, CONFIG, db), Target.MEMORY, memory)
    return user


def test_union_in_order_without_duplicates_traced_and_undoable(home: Path, db: SessionDB) -> None:
    keep = person(home, db, "telegram", "1", ["Lives in Lisbon", "Has a cat named Miso"])
    gone = person(home, db, "slack", "U1", ["Has a cat named Miso", "Works at Acme"])
    report = merge_memory(home, CONFIG, db, keep, gone)
    store = UserMemory(home, keep, CONFIG, db).store(Target.MEMORY)
    assert store.read().entries == ("Lives in Lisbon", "Has a cat named Miso", "Works at Acme")
    assert report.added[Target.MEMORY] == 1 and not report.waiting.get(Target.MEMORY)
    assert report.archived is not None
    assert UserMemory(home, gone, CONFIG, db).store(Target.MEMORY).read().entries == ()
    if CONFIG.backend == "files":
        assert (Path(report.archived) / "MEMORY.md").exists()
    events = db.memory_log.memory_events(keep, "Acme")
    assert [(e.action, e.actor) for e in events] == [("merge", "user")]
    done, _ = undo_last(UserMemory(home, keep, CONFIG, db), db)
    assert done and store.read().entries == ("Lives in Lisbon", "Has a cat named Miso")


def test_over_the_limit_the_rest_waits_flagged_and_consolidation_folds_it_in(
    home: Path, db: SessionDB, fake_llm: FakeOpenAI
) -> None:
    mine = [f"Fact number {i} about the keeper, long enough to matter" for i in range(4)]
    theirs = [f"Other fact {i} from the linked account, also long" for i in range(4)]
    keep = person(home, db, "telegram", "1", mine)
    gone = person(home, db, "slack", "U1", theirs)
    report = merge_memory(home, CONFIG, db, keep, gone)
    memory = UserMemory(home, keep, CONFIG, db)
    state = memory.store(Target.MEMORY).read()
    assert state.used <= CONFIG.memory_char_limit
    assert set(state.entries) | set(state.pending) == set(mine) | set(theirs)  # nothing lost
    assert report.waiting[Target.MEMORY] == len(state.pending) > 0
    book = db.memory_log.consolidation_state(keep, "memory")
    assert book.needs_consolidation and "linked account" in (book.last_error or "")
    assert {
        e.entry_after for e in db.memory_log.memory_events(keep) if e.action == "merge_pending"
    } == set(state.pending)

    every = list(state.with_pending().entries)
    merged = [
        {
            "text": "Fact number 0, 1, 2, 3 about the keeper, long enough to matter",
            "sources": [1, 2, 3, 4],
        },
        {
            "text": "Other fact 0, 1, 2, 3 from the linked account, also long",
            "sources": [5, 6, 7, 8],
        },
    ]
    assert len(every) == 8
    fake_llm.push(Reply(text=json.dumps({"entries": merged, "dropped": []})))
    model = LLMClient(Endpoint(base_url=fake_llm.base_url, model="m", max_retries=0))

    async def run() -> str:
        try:
            outcome = await consolidate(memory, Target.MEMORY, db, model, CONFIG.consolidation)
        finally:
            await model.close()
        return outcome.status

    assert asyncio.run(run()) == "applied", db.memory_log.consolidation_state(
        keep, "memory"
    ).last_error
    prompt = fake_llm.requests[-1]["messages"][-1]["content"]
    assert all(entry in prompt for entry in every)  # the waiting entries were offered too
    after = memory.store(Target.MEMORY).read()
    assert after.pending == () and after.pending_raw == ""
    assert len(after.entries) == 2

    done, _ = undo_last(memory, db)  # undoing the consolidation restores the waiting file
    restored = memory.store(Target.MEMORY).read()
    assert done and restored.entries == state.entries and restored.pending == state.pending


def test_linking_merges_people_and_the_owner_id_survives(home: Path, db: SessionDB) -> None:
    from hermes.identity import owner_user_id

    owner = owner_user_id(home)
    db.people.ensure_user(owner, role="owner")
    PeopleDB(db).ensure_identity("cli", "local", owner)
    tg = person(home, db, "telegram", "1", ["Prefers tea over coffee"])
    code = db.access.create_link_code(tg).code
    people = People(HermesConfig(), db, MemoryService(home, CONFIG, db))
    outcome = people.link(code, requester="cli:local", current_user=owner)
    assert outcome.ok and outcome.user_id == owner and outcome.merged_away == tg
    assert db.people.user_for_identity("telegram", "1") == owner
    assert UserMemory(home, owner, CONFIG, db).store(Target.MEMORY).read().entries == (
        "Prefers tea over coffee",
    )
    again = people.link(code, requester="cli:local", current_user=owner)
    assert not again.ok  # single use


def test_a_damaged_store_stops_the_merge_before_anything_is_written(
    home: Path, db: SessionDB
) -> None:
    keep = person(home, db, "telegram", "1", ["Lives in Lisbon"])
    gone = person(home, db, "slack", "U1", ["Works at Acme"])
    over = "x" * (CONFIG.user_char_limit + 1)  # the limit was lowered, or a hand edit
    seed(UserMemory(home, keep, CONFIG, db), Target.USER, [over])
    with pytest.raises(MergeError, match="needs fixing by hand"):
        merge_memory(home, CONFIG, db, keep, gone)
    assert UserMemory(home, keep, CONFIG, db).store(Target.MEMORY).read().entries == (
        "Lives in Lisbon",
    )
    left = UserMemory(home, gone, CONFIG, db).store(Target.MEMORY).read()
    assert left.entries == ("Works at Acme",)  # not archived, not merged


def test_after_a_link_the_old_id_and_its_live_code_reach_the_survivor(
    home: Path, db: SessionDB
) -> None:
    """A turn that began before the link writes under the id it knew; a code the merged
    person had minted still works: both reach the person who survived."""
    keep = person(home, db, "telegram", "1", ["Lives in Lisbon"])
    gone = person(home, db, "slack", "U1", ["Works at Acme"])
    third = person(home, db, "discord", "9", [])
    gone_code = db.access.create_link_code(gone).code
    service = MemoryService(home, CONFIG, db, auto_consolidate=False)
    people = People(HermesConfig(), db, service)
    code = db.access.create_link_code(keep).code
    assert people.link(code, requester="slack:U1", current_user=gone).user_id == keep
    assert db.people.current_id(gone) == keep and db.people.get_user(gone) is None

    args = {"action": "add", "target": "memory", "content": "Plays the cello"}
    assert asyncio.run(service.apply(gone, args, actor="agent")).ok
    entries = UserMemory(home, keep, CONFIG, db).store(Target.MEMORY).read().entries
    assert entries == ("Lives in Lisbon", "Works at Acme", "Plays the cello")
    assert db.people.get_user(gone) is None  # the write did not bring the old id back
    assert UserMemory(home, gone, CONFIG, db).store(Target.MEMORY).read().entries == ()

    linked = people.link(gone_code, requester="discord:9", current_user=third)
    assert linked.ok and linked.user_id == keep and linked.merged_away == third
    assert db.people.current_id(third) == keep


def test_a_link_holds_only_its_two_peoples_gates(home: Path, db: SessionDB) -> None:
    """While Ann and Bo are being linked (their gates held alone), Cy's memory write
    goes on; Ann's waits for the link and then lands."""
    ann = person(home, db, "telegram", "1", ["Likes tea"])
    bo = person(home, db, "telegram", "2", ["Likes jazz"])
    cy = person(home, db, "telegram", "3", ["Likes chess"])
    service = MemoryService(home, CONFIG, db)
    held, release = threading.Event(), threading.Event()

    def linking() -> None:
        with service.gate([bo, ann], exclusive=True):
            held.set()
            release.wait(30)

    def write(user_id: str, note: str) -> threading.Event:
        done = threading.Event()

        def run() -> None:
            args = {"action": "add", "target": "memory", "content": note}
            outcome = asyncio.run(service.apply(user_id, args, actor="user"))
            assert outcome.result.get("success"), outcome.result
            done.set()

        threading.Thread(target=run, daemon=True).start()
        return done

    link = threading.Thread(target=linking, daemon=True)
    link.start()
    assert held.wait(10)
    try:
        assert write(cy, "Plays on Sundays").wait(10), "another person's write waited"
        waiting = write(ann, "Likes green tea")
        assert not waiting.wait(0.5), "a write of someone being linked went on"
    finally:
        release.set()
    link.join(10)
    assert waiting.wait(10)
    entries = UserMemory(home, ann, CONFIG, db).store(Target.MEMORY).read().entries
    assert entries == ("Likes tea", "Likes green tea")
