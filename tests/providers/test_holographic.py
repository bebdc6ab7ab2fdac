"""The `holographic` provider: its fact store, ranking, tools and mirror of the built-in
stores, through the real app and on its own; one person's facts never reach another."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.pipeline.router import Router
from hermes.providers.holographic import HolographicProvider, entities, hrr, similarity
from hermes.state.db import SessionDB
from hermes.state.factstore import FILENAME, FactStore, FileFactStore
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm, scenario

ALICE, BOB = "u_00000000000000a1", "u_00000000000000b2"


@pytest.fixture(autouse=True)
def state(home: Path, database_url: str | None) -> Iterator[SessionDB]:
    """Every test on both backends: the fact store is the home's file beside SQLite, and
    the state database's tables when the home's state is on PostgreSQL."""
    db = SessionDB.open(home, database_url)
    yield db
    db.close()


def person(home: Path, user_id: str) -> HolographicProvider:
    provider = HolographicProvider()
    provider.initialize(
        "s_1", hermes_home=home, platform="cli", user_id=user_id, agent_context="primary"
    )
    return provider


def call(provider: HolographicProvider, name: str, **args: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(asyncio.run(provider.handle_tool_call(name, args)))
    return result


def test_search_ranks_the_fact_about_the_entity_and_relation_asked(home: Path) -> None:
    alice = person(home, ALICE)
    for fact in (
        "Mina likes hiking in the Alps",
        "Mina works at Acme as a backend engineer",
        "Leo likes chess",
        "The Postgres replica port is 5433",
    ):
        assert call(alice, "fact_store", action="add", content=fact)["success"]
    found = call(alice, "fact_store", action="search", query="where does Mina work?")
    assert found["facts"][0]["content"] == "Mina works at Acme as a backend engineer"
    port = call(alice, "fact_store", action="search", query="postgres replica port")
    assert port["facts"][0]["content"].endswith("5433")
    recalled = asyncio.run(alice.prefetch("what does Leo like", session_id="s_1"))
    assert recalled.splitlines()[0].startswith("- Leo likes chess [general, trust 0.5, fact #")


def test_cjk_facts_are_found_by_their_words(home: Path) -> None:
    alice = person(home, ALICE)
    call(alice, "fact_store", action="add", content="我的猫叫小白")
    call(alice, "fact_store", action="add", content="서울에서 비빔밥을 좋아해요")
    call(alice, "fact_store", action="add", content="大阪の実家に猫がいる")
    assert (
        "小白" in asyncio.run(alice.prefetch("我的猫叫什么名字", session_id="s_1")).split("\n")[0]
    )
    assert "비빔밥" in asyncio.run(alice.prefetch("비빔밥 좋아해?", session_id="s_1"))
    assert "大阪" in asyncio.run(alice.prefetch("実家はどこ", session_id="s_1"))


def test_entities_by_rules() -> None:
    found = entities("Mina uses PostgreSQL 16 and gpt-4 with @bob on 'Project X' in 서울")
    assert {"mina", "postgresql", "gpt-4", "@bob", "project x", "서울"} <= set(found)
    assert "uses" not in found and "and" not in found


def test_hrr_binds_entities_to_relations() -> None:
    """'Mina likes tea' and 'Leo likes coffee, Mina hates coffee': a question about
    what Mina likes is nearer the fact where mina is bound to likes."""
    question = hrr(["mina"], ["likes"])
    bound = hrr(["mina"], ["likes", "tea"])
    unbound = hrr(["leo"], ["likes", "coffee", "hates"])
    assert similarity(question, bound) > similarity(question, unbound)


def test_probe_related_contradict_feedback_update_remove(home: Path) -> None:
    alice = person(home, ALICE)
    first = call(alice, "fact_store", action="add", content="Leo plays chess with Mina")["fact_id"]
    call(alice, "fact_store", action="add", content="Mina lives in Berlin")
    probe = call(alice, "fact_store", action="probe", entity="Mina")
    assert probe["count"] == 2
    related = call(alice, "fact_store", action="related", entity="mina")
    assert set(related["related"]) == {"leo", "berlin"}
    contra = call(
        alice, "fact_store", action="contradict", fact_id=first, content="Leo plays go now"
    )
    assert contra["contradicted"] == first and contra["old_trust"] == pytest.approx(0.2)
    assert call(alice, "fact_feedback", fact_id=contra["fact_id"], helpful=True)["trust"] == 0.6
    # a contradicted fact (trust 0.2) is searchable but no longer recalled
    assert "chess" not in asyncio.run(alice.prefetch("what does Leo play", session_id="s_1"))
    assert call(
        alice, "fact_store", action="update", fact_id=first, content="Leo once played chess"
    )["success"]
    assert call(alice, "fact_store", action="remove", fact_id=first)["success"]
    assert not call(alice, "fact_store", action="remove", fact_id=first)["success"]
    bad = call(alice, "fact_feedback", fact_id="one", helpful=True)
    assert not bad["success"] and "integer" in bad["error"]
    assert not call(alice, "fact_store", action="fly")["success"]


def test_one_persons_facts_never_reach_another(home: Path) -> None:
    alice, bob = person(home, ALICE), person(home, BOB)
    call(alice, "fact_store", action="add", content="Mina's passport number is X123")
    call(bob, "fact_store", action="add", content="Bob's cat is called Mina")
    assert "X123" not in asyncio.run(bob.prefetch("Mina passport", session_id="s_1"))
    assert call(bob, "fact_store", action="probe", entity="mina")["count"] == 1
    assert call(bob, "fact_store", action="list")["count"] == 1
    theirs = call(alice, "fact_store", action="list")["facts"][0]["fact_id"]
    assert not call(bob, "fact_store", action="remove", fact_id=theirs)["success"]
    assert not call(bob, "fact_feedback", fact_id=theirs, helpful=False)["success"]
    assert call(alice, "fact_store", action="list")["count"] == 1
    # the same text for two people is two facts
    call(bob, "fact_store", action="add", content="Mina's passport number is X123")
    store = FactStore.at(home)
    assert [len(store.facts(ALICE)), len(store.facts(BOB))] == [1, 2]
    if isinstance(store, FileFactStore):
        assert oct((home / FILENAME).stat().st_mode & 0o777) == "0o600"
    else:
        assert not (home / FILENAME).exists()  # in the database, nothing on this disk


def remembering(request: dict[str, Any]) -> Reply:
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Reply(text="done")
    text = str(last["content"])
    if "remember" in text:
        return Reply.tool_call(
            "memory", {"action": "add", "target": "user", "content": "Drinks oolong tea"}
        )
    if "switch" in text:
        return Reply.tool_call(
            "memory",
            {
                "action": "replace",
                "target": "user",
                "old_text": "oolong",
                "content": "Drinks green tea",
            },
        )
    if "fact" in text:
        return Reply.tool_call("fact_store", {"action": "add", "content": "Mina runs on Sundays"})
    return Reply(text="hello")


def test_through_the_app_it_mirrors_the_built_in_stores_and_recalls(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = remembering

    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        texts = [
            "please remember my tea",
            "I switch teas",
            "note this fact",
            "what tea do I drink and when does Mina run?",
            "/memory forget green tea",
        ]
        for n, text in enumerate(texts, 1):
            await adapter.deliver(dm("alice", text))
            await adapter.wait_for(n)
        await router.agent.memory.providers.drain(5)
        return adapter.texts()

    scenario(home, fake_llm, body, memory={"provider": "holographic", "review_interval": 0})
    first_prompt = fake_llm.requests[0]["messages"][0]["content"]
    assert "## Fact store" in first_prompt
    asked = next(
        r["messages"][-1]["content"]
        for r in fake_llm.requests
        if "what tea" in str(r["messages"][-1]["content"])
    )
    assert "Drinks green tea [user" in asked and "Mina runs on Sundays" in asked
    assert "oolong" not in asked  # the replace was mirrored as a replace
    app_state = SessionDB.open(home)  # the scenario's own (the app's people)
    people = [row.user.id for row in app_state.people.users()]
    app_state.close()
    store = FactStore.at(home)
    facts = [f for user in people for f in store.facts(user)]
    assert any(f.content == "Mina runs on Sundays" for f in facts)
    assert [f.content for f in facts if f.source.startswith("builtin:")] == []  # removed too
