"""The session_search tool: grouping, limits, browsing, summaries and their failures."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from hermes.llm.client import LLMClient
from hermes.llm.endpoint import Endpoint
from hermes.llm.reranker import LLMReranker
from hermes.llm.summarizer import LLMSummarizer
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.search import SearchScope
from hermes.tools.session_search import SESSION_SEARCH_SCHEMA, SessionSearchTool, SummaryPolicy
from tests.fakes.openai_server import FakeOpenAI, Reply


class RecordingSummarizer:
    """A Summarizer test double: answers from a script, records its inputs."""

    def __init__(self, answer: str = "They discussed it.", delay: float = 0.0, fail: bool = False):
        self.answer, self.delay, self.fail = answer, delay, fail
        self.calls: list[tuple[str, str]] = []
        self.active = self.peak = 0

    async def summarize(self, query: str, excerpt: str) -> str:
        self.calls.append((query, excerpt))
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(self.delay)
            if self.fail:
                raise ConnectionError("model down")
            return self.answer
        finally:
            self.active -= 1


def run(tool: SessionSearchTool, **args: Any) -> dict[str, Any]:
    result = asyncio.run(tool.run(args))
    json.dumps(result)
    return result


def many_sessions(db: SessionDB, user: str, count: int, word: str = "telescope") -> list[str]:
    ids = []
    for i in range(count):
        chat = db.conversations.start_session(user, "telegram" if i % 2 else "cli", f"k{i}")
        db.conversations.add_messages(
            chat.id,
            [
                NewMessage("user", f"session {i}: shall we buy a {word}? " + "filler " * i),
                NewMessage("assistant", f"A {word} costs money."),
            ],
        )
        ids.append(chat.id)
    return ids


def test_schema() -> None:
    props = SESSION_SEARCH_SCHEMA["function"]["parameters"]["properties"]
    assert set(props) == {"query", "limit", "platform", "role"}


def test_groups_by_session_and_defaults_to_three(db: SessionDB, alice: str) -> None:
    many_sessions(db, alice, 6)
    result = run(SessionSearchTool(db, SearchScope(alice)), query="telescope")
    assert result["success"] and result["count"] == 3
    ids = [r["session_id"] for r in result["results"]]
    assert len(set(ids)) == 3
    first = result["results"][0]
    assert set(first) >= {"session_id", "platform", "when", "title", "snippets"}
    assert len(first["snippets"]) == 2  # both matching messages of that session
    assert (
        first["summary_note"] == "raw excerpt (no summary model)"
        and "telescope" in first["excerpt"]
    )


@pytest.mark.parametrize(("asked", "got"), [(1, 1), (10, 10), (50, 10), (0, 1)])
def test_limit_is_clamped(db: SessionDB, alice: str, asked: int, got: int) -> None:
    many_sessions(db, alice, 12)
    result = run(SessionSearchTool(db, SearchScope(alice)), query="telescope", limit=asked)
    assert result["count"] == got


def test_bad_arguments_are_errors_not_exceptions(db: SessionDB, alice: str) -> None:
    tool = SessionSearchTool(db, SearchScope(alice))
    assert run(tool, query=5)["success"] is False
    assert run(tool, query="x", limit="three")["success"] is False
    assert run(tool, query="x", role="tool")["success"] is False


def test_current_session_is_excluded(db: SessionDB, alice: str) -> None:
    ids = many_sessions(db, alice, 2)
    tool = SessionSearchTool(db, SearchScope(alice, exclude_session_id=ids[0]))
    result = run(tool, query="telescope", limit=10)
    assert [r["session_id"] for r in result["results"]] == [ids[1]]


def test_platform_argument_filters(db: SessionDB, alice: str) -> None:
    many_sessions(db, alice, 6)
    result = run(
        SessionSearchTool(db, SearchScope(alice)), query="telescope", platform="telegram", limit=10
    )
    assert result["count"] == 3 and {r["platform"] for r in result["results"]} == {"telegram"}


def test_empty_query_lists_recent_sessions(db: SessionDB, alice: str, bob: str) -> None:
    ids = many_sessions(db, alice, 4)
    many_sessions(db, bob, 2, word="bobsecret")
    result = run(SessionSearchTool(db, SearchScope(alice)), query="")
    assert result["mode"] == "recent"
    assert [r["session_id"] for r in result["results"]] == list(reversed(ids))[:3]
    assert "telescope" in result["results"][0]["preview"]
    assert "bobsecret" not in json.dumps(result)


def test_no_results(db: SessionDB, alice: str) -> None:
    many_sessions(db, alice, 2)
    assert run(SessionSearchTool(db, SearchScope(alice)), query="submarine")["results"] == []


def test_summaries_run_in_parallel_under_a_cap(db: SessionDB, alice: str) -> None:
    many_sessions(db, alice, 8)
    summarizer = RecordingSummarizer(delay=0.05)
    tool = SessionSearchTool(db, SearchScope(alice), summarizer, SummaryPolicy(concurrency=2))
    result = run(tool, query="telescope", limit=6)
    assert [r["summary"] for r in result["results"]] == ["They discussed it."] * 6
    assert summarizer.peak == 2 and len(summarizer.calls) == 6
    query, context = summarizer.calls[0]
    assert query == "telescope" and "telescope" in context and len(context) <= 6000


def test_summary_failure_and_timeout_fall_back_to_raw_excerpt(db: SessionDB, alice: str) -> None:
    many_sessions(db, alice, 2)
    failing = SessionSearchTool(db, SearchScope(alice), RecordingSummarizer(fail=True))
    result = run(failing, query="telescope")
    assert all(
        r["summary_note"] == "raw excerpt (summary ConnectionError)" for r in result["results"]
    )
    assert all("telescope" in r["excerpt"] for r in result["results"])
    slow = SessionSearchTool(
        db, SearchScope(alice), RecordingSummarizer(delay=5), SummaryPolicy(timeout_s=0.05)
    )
    result = run(slow, query="telescope")
    assert all(r["summary_note"] == "raw excerpt (summary timed out)" for r in result["results"])


def test_guessing_another_users_content_finds_nothing(db: SessionDB, alice: str, bob: str) -> None:
    many_sessions(db, bob, 3, word="quetzalcoatl")
    tool = SessionSearchTool(db, SearchScope(alice))
    for args in (
        {"query": "quetzalcoatl"},
        {"query": "quetzalcoatl", "platform": "telegram"},
        {"query": ""},
    ):
        assert "quetzalcoatl" not in json.dumps(run(tool, **args)["results"])


def test_summaries_from_the_auxiliary_model_over_http(
    db: SessionDB, alice: str, fake_llm: FakeOpenAI
) -> None:
    many_sessions(db, alice, 2)
    fake_llm.default = Reply(text="They talked about buying a telescope.")

    async def go() -> dict[str, Any]:
        llm = LLMClient(Endpoint(base_url=fake_llm.base_url, model="aux", max_retries=0))
        try:
            tool = SessionSearchTool(db, SearchScope(alice), LLMSummarizer(llm))
            return await tool.run({"query": "telescope"})
        finally:
            await llm.close()

    result = asyncio.run(go())
    assert [r["summary"] for r in result["results"]] == [
        "They talked about buying a telescope."
    ] * 2
    assert len(fake_llm.requests) == 2
    assert all(r["temperature"] == 0.7 and r["model"] == "aux" for r in fake_llm.requests)
    fake_llm.default = Reply(status=500)
    failed = asyncio.run(go())
    assert all(r["summary_note"] == "raw excerpt (summary LLMError)" for r in failed["results"])


def distinct_sessions(db: SessionDB, user: str) -> dict[str, str]:
    """Three sessions whose best messages all share the question's word: topic -> id."""
    ids = {}
    for topic, text in (
        ("garden", "the tomato plants need a trellis, said the garden centre"),
        ("bike", "the bike shop said the chain needs replacing"),
        ("car", "the garage said the car needs new brakes"),
    ):
        chat = db.conversations.start_session(user, "telegram", topic)
        db.conversations.add_messages(chat.id, [NewMessage("user", text)])
        ids[topic] = chat.id
    return ids


def search_with_reranker(
    db: SessionDB, alice: str, fake_llm: FakeOpenAI, policy: SummaryPolicy
) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        llm = LLMClient(Endpoint(base_url=fake_llm.base_url, model="aux", max_retries=0))
        try:
            tool = SessionSearchTool(
                db, SearchScope(alice), None, policy, reranker=LLMReranker(llm)
            )
            return await tool.run({"query": "what did they say needs doing", "limit": 3})
        finally:
            await llm.close()

    return asyncio.run(go())


def test_a_reranker_puts_the_best_candidates_in_the_models_order(
    db: SessionDB, alice: str, fake_llm: FakeOpenAI
) -> None:
    """search.rerank: the fused list's best messages go to the search model, numbered,
    with the question; the sessions come back in the order it named (one it left out
    after them, an unknown number ignored)."""
    ids = distinct_sessions(db, alice)
    plain = run(SessionSearchTool(db, SearchScope(alice)), query="what did they say needs doing")
    fused = [r["session_id"] for r in plain["results"]]
    fake_llm.default = Reply(text="3, 9, 1")  # candidate 9 does not exist
    policy = SummaryPolicy(rerank_candidates=3)
    result = search_with_reranker(db, alice, fake_llm, policy)
    order = [r["session_id"] for r in result["results"]]
    assert order == [fused[2], fused[0], fused[1]] and set(order) == set(ids.values())
    asked = fake_llm.requests[-1]["messages"][-1]["content"]
    assert "Search query: what did they say needs doing" in asked
    assert all(f"{n}. " in asked for n in (1, 2, 3)) and "4. " not in asked


@pytest.mark.parametrize(
    "answer", [Reply(text="none of these"), Reply(status=500), Reply(text="2", delay=2.0)]
)
def test_a_failing_reranker_leaves_the_fused_order(
    db: SessionDB, alice: str, fake_llm: FakeOpenAI, answer: Reply
) -> None:
    """No usable order (no numbers, a failure, past `rerank_timeout_s`): the search
    answers in the fused order, as without a reranker."""
    distinct_sessions(db, alice)
    query = "what did they say needs doing"
    fused = run(SessionSearchTool(db, SearchScope(alice)), query=query, limit=3)
    fake_llm.default = answer
    result = search_with_reranker(db, alice, fake_llm, SummaryPolicy(rerank_timeout_s=0.5))
    assert result["success"] and result["results"] == fused["results"]
