"""Compression into a child session, and the background memory review."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from hermes.agent.agent import Agent, Surface, TurnResult
from hermes.agent.compression import FLUSH_NOTE, SUMMARY_PREFIX
from hermes.agent.review import INSTRUCTIONS as REVIEW_INSTRUCTIONS
from tests.agent.conftest import Harness, last_user_content
from tests.fakes.openai_server import Reply

CLI = Surface("cli")
LONG = "lorem ipsum dolor sit amet " * 60  # ~400 tokens by the estimate


def scripted(request: dict[str, Any]) -> Reply:
    """Answers by what the request is: flush turn, summary, review, or a normal turn."""
    system = request["messages"][0]["content"]
    last = last_user_content(request)
    if last == FLUSH_NOTE:
        if request["messages"][-1]["role"] == "tool":
            return Reply(text="ok")
        return Reply.tool_call(
            "memory", {"action": "add", "target": "memory", "content": "Project codename: Heron"}
        )
    if system.startswith("Summarize the conversation"):
        return Reply(text="The user described project Heron at length.")
    return Reply(text="Understood.", prompt_tokens=300 * len(request["messages"]))


def test_compression_continues_in_a_child_with_a_fresh_snapshot(harness: Harness) -> None:
    harness.agent_config = harness.agent_config.model_copy(
        update={"context_budget_tokens": 1500, "keep_recent_messages": 2}
    )
    harness.fake.responder = scripted

    async def scenario(agent: Agent) -> tuple[str, list[TurnResult], Any]:
        conv = agent.sessions.open(harness.user, CLI, "cli:k")
        parent = conv.id
        results = [await agent.turn(conv, f"part {i}: {LONG}", CLI) for i in range(6)]
        return parent, results, conv

    parent_id, results, _conv = harness.run(scenario)
    compressed = [r for r in results if r.compressed_from]
    assert compressed and compressed[0].compressed_from == parent_id
    parent = harness.db.conversations.get_session(parent_id, harness.user)
    assert parent is not None and parent.end_reason == "compression"
    child = harness.db.conversations.get_session(compressed[0].session_id, harness.user)
    assert child is not None and child.parent_session_id == parent_id
    rows = harness.db.conversations.messages(child.id, harness.user)
    assert rows[0].content.startswith(SUMMARY_PREFIX) and "Heron" in rows[0].content
    child_prompt = harness.db.conversations.system_prompt(child.system_prompt_hash or "")
    parent_prompt = harness.db.conversations.system_prompt(parent.system_prompt_hash or "")
    assert child_prompt and "Project codename: Heron" in child_prompt  # refreshed snapshot
    assert parent_prompt and "Heron" not in parent_prompt
    # nothing lost: every user message of the parent is still there
    parent_users = [
        m.content
        for m in harness.db.conversations.messages(parent_id, harness.user)
        if m.role == "user"
    ]
    assert parent_users[:2] == [f"part 0: {LONG}", f"part 1: {LONG}"]
    flush = [r for r in harness.fake.requests if last_user_content(r) == FLUSH_NOTE]
    assert flush and [t["function"]["name"] for t in flush[0]["tools"]] == ["memory"]
    assert all(r.ok for r in results)


def test_review_runs_after_the_reply_and_never_twice_at_once(harness: Harness) -> None:
    harness.memory_config = harness.memory_config.model_copy(update={"review_interval": 2})
    reviews: list[float] = []

    def responder(request: dict[str, Any]) -> Reply:
        if request["messages"][0]["content"].startswith(REVIEW_INSTRUCTIONS):
            reviews.append(time.monotonic())
            if request["messages"][-1]["role"] == "tool":
                return Reply(text="done")
            return (
                Reply.tool_call(
                    "memory",
                    {"action": "add", "target": "user", "content": "Has a cat named Miso"},
                )
                if len(reviews) == 1
                else Reply(text="nothing")
            )
        return Reply(text="Nice!")

    harness.fake.responder = responder

    async def scenario(agent: Agent) -> list[float]:
        conv = agent.sessions.open(harness.user, CLI, "k")
        await agent.turn(conv, "my cat Miso is funny", CLI)
        answered = []
        await agent.turn(conv, "she sleeps all day", CLI)
        answered.append(time.monotonic())
        assert reviews == []  # the reply came back before the review started
        await asyncio.sleep(0)
        return answered

    harness.run(scenario)  # drain() waits for the review
    assert reviews, "the review never ran"
    memory = (harness.home / "memories" / harness.user / "USER.md").read_text()
    assert memory == "Has a cat named Miso"
    review_requests = [
        r
        for r in harness.fake.requests
        if r["messages"][0]["content"].startswith(REVIEW_INSTRUCTIONS)
    ]
    assert [t["function"]["name"] for t in review_requests[0]["tools"]] == ["memory"]
    assert "she sleeps all day" in review_requests[0]["messages"][1]["content"]


def test_one_review_at_a_time_per_user(harness: Harness) -> None:
    harness.memory_config = harness.memory_config.model_copy(update={"review_interval": 1})
    started: list[str] = []

    def responder(request: dict[str, Any]) -> Reply:
        if request["messages"][0]["content"].startswith(REVIEW_INSTRUCTIONS):
            started.append("review")
            return Reply(text="nothing", delay=1.0)
        return Reply(text="ok")

    harness.fake.responder = responder

    async def scenario(agent: Agent) -> None:
        conv = agent.sessions.open(harness.user, CLI, "k")
        for text in ("one", "two", "three"):
            await agent.turn(conv, text, CLI)
            await asyncio.sleep(0.05)  # let the review task start

    begun = time.monotonic()
    harness.run(scenario)
    assert started == ["review"]  # turns two and three found one already running
    assert time.monotonic() - begun < 5


def test_a_message_too_long_to_ever_send_is_answered_and_does_not_sink_the_session(
    harness: Harness,
) -> None:
    """One message over half the context budget (a pasted book, documents past what the
    model takes): a clear answer, no model call, nothing stored, so the next message of
    the same session is answered as usual (stored, it rode along in every later
    request and each one failed at the endpoint's context limit)."""
    harness.agent_config = harness.agent_config.model_copy(
        update={"context_budget_tokens": 2000, "keep_recent_messages": 2}
    )

    def window(request: dict[str, Any]) -> Reply:  # an endpoint with a small context
        if len(json.dumps(request["messages"])) > 12_000:
            return Reply(status=400)
        return Reply(text="Understood.")

    harness.fake.responder = window
    book = "Il était une fois un très long livre. " * 400  # ~15,000 characters
    china = "很久很久以前有一本很长的书。" * 100  # 1,400 characters, ~1,400 tokens

    async def scenario(agent: Agent) -> tuple[list[TurnResult], str]:
        conv = agent.sessions.open(harness.user, CLI, "cli:k")
        results = [await agent.turn(conv, text, CLI) for text in (book, china, "hello")]
        return results, conv.id

    (long, cjk, hello), session_id = harness.run(scenario)
    assert not long.ok and "too long" in long.text and "1,000" in long.text
    assert not cjk.ok and "too long" in cjk.text  # counted as CJK is: a token a character
    assert hello.ok and hello.text == "Understood."
    stored = [m.content for m in harness.db.conversations.messages(session_id, harness.user)]
    assert stored == ["hello", "Understood."]
    assert len(harness.fake.requests) == 1
