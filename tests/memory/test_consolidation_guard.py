"""The consolidation validator against a hostile model: every proposal in
tests/memory/data/hostile_consolidations.json and hostile_swaps.json that loses,
inverts, moves or swaps what a source said is rejected (the store byte-identical, the
reason recorded); every good one applies and undo restores the exact bytes. The model
is the fake OpenAI-compatible server behind the real client, answering with each
proposal in turn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from hermes.config import ConsolidationConfig, MemoryConfig
from hermes.identity import owner_user_id
from hermes.llm.client import LLMClient
from hermes.llm.endpoint import Endpoint
from hermes.memory.consolidation import Outcome, consolidate
from hermes.memory.journal import run_recorded
from hermes.memory.store import Target
from hermes.memory.tool import MemoryTool
from hermes.memory.undo import undo_last
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI, Reply

DATA = json.loads(
    (Path(__file__).parent / "data" / "hostile_consolidations.json").read_text("utf-8")
)
SWAPS = json.loads((Path(__file__).parent / "data" / "hostile_swaps.json").read_text("utf-8"))
CONFIG = ConsolidationConfig()
ATTACKS = [(DATA, c) for c in DATA["attacks"]] + [(SWAPS, c) for c in SWAPS["attacks"]]
GOOD = [(DATA, c) for c in DATA["good"]] + [(SWAPS, c) for c in SWAPS["good"]]


def build_proposal(case: dict[str, Any], data: dict[str, Any] = DATA) -> dict[str, Any]:
    """The case's entries and drops; every entry it does not mention carried verbatim."""
    dropped = {int(i): reason for i, reason in case.get("dropped", {}).items()}
    mentioned = {s for item in case["entries"] for s in item["sources"]} | set(dropped)
    items = [*case["entries"]] + [
        {"text": text, "sources": [i]}
        for i, text in enumerate(data["entries"], 1)
        if i not in mentioned
    ]
    items.sort(key=lambda item: min(item["sources"]))
    return {
        "entries": items,
        "dropped": [{"id": i, "reason": reason} for i, reason in dropped.items()],
    }


def write_store(home: Path, db: SessionDB, data: dict[str, Any] = DATA) -> UserMemory:
    """The store as its people wrote it: the user's own entries with actor 'user'."""
    user = db.people.ensure_user(owner_user_id(home), role="owner").id
    memory = UserMemory(home, user, MemoryConfig())
    tool = MemoryTool(memory)
    for i, text in enumerate(data["entries"], 1):
        actor = "user" if i in data["user_written"] else "agent"
        args = {"action": "add", "target": "memory", "content": text}
        assert run_recorded(tool, db, args, actor=actor).ok, text
    return memory


def consolidate_with(fake: FakeOpenAI, memory: UserMemory, db: SessionDB, body: Any) -> Outcome:
    fake.push(Reply(text=json.dumps(body, ensure_ascii=False)))

    async def go() -> Outcome:
        client = LLMClient(Endpoint(base_url=fake.base_url, model="aux", max_retries=0, timeout=5))
        try:
            return await consolidate(memory, Target.MEMORY, db, client, CONFIG, force=True)
        finally:
            await client.close()

    return asyncio.run(go())


@pytest.mark.parametrize(("data", "case"), ATTACKS, ids=[c["name"] for _, c in ATTACKS])
def test_every_hostile_proposal_is_rejected_and_changes_nothing(
    home: Path, fake_llm: FakeOpenAI, data: dict[str, Any], case: dict[str, Any]
) -> None:
    db = SessionDB.open(home)
    try:
        memory = write_store(home, db, data)
        path = memory.file_store(Target.MEMORY).path
        before = path.read_bytes()
        outcome = consolidate_with(fake_llm, memory, db, build_proposal(case, data))
        assert outcome.status == "rejected", (case["name"], outcome)
        if case["category"] == "swap":  # by the meaning check, not by another rule
            assert any(w in outcome.detail for w in ("swaps", "recombines", "moves")), outcome
        assert path.read_bytes() == before
        book = db.memory_log.consolidation_state(memory.user_id, "memory")
        assert book.needs_consolidation and outcome.detail in (book.last_error or "")
    finally:
        db.close()


@pytest.mark.parametrize(("data", "case"), GOOD, ids=[c["name"] for _, c in GOOD])
def test_a_faithful_proposal_applies_and_undo_restores_the_bytes(
    home: Path, fake_llm: FakeOpenAI, data: dict[str, Any], case: dict[str, Any]
) -> None:
    db = SessionDB.open(home)
    try:
        memory = write_store(home, db, data)
        path = memory.file_store(Target.MEMORY).path
        before = path.read_bytes()
        outcome = consolidate_with(fake_llm, memory, db, build_proposal(case, data))
        assert outcome.status == "applied", (case["name"], outcome.detail)
        assert path.read_bytes() != before
        done, _ = undo_last(memory, db)
        assert done and path.read_bytes() == before
    finally:
        db.close()


def test_protected_entries_left_out_of_a_proposal_are_kept_in_place(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    db = SessionDB.open(home)
    try:
        memory = write_store(home, db)
        body = build_proposal(DATA["good"][0])
        left_out = ([4], [7], [14])  # an instruction, a correction, the user's own words
        body["entries"] = [item for item in body["entries"] if item["sources"] not in left_out]
        outcome = consolidate_with(fake_llm, memory, db, body)
        assert outcome.status == "applied", outcome.detail
        entries = memory.store(Target.MEMORY).read().entries
        assert [e for e in entries if e in (DATA["entries"][i - 1] for (i,) in left_out)] == [
            DATA["entries"][3],
            DATA["entries"][6],
            DATA["entries"][13],
        ]
        assert entries.index(DATA["entries"][3]) < entries.index(DATA["entries"][4])
    finally:
        db.close()
