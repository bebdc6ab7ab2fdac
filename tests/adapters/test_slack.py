"""Slack end to end: the real slack-bolt in Socket Mode against a local fake Slack."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from adapters.slack.adapter import SlackAdapter, to_event
from gateway.edge.events import MessageEvent
from gateway.edge.ports import MenuEntry
from tests.adapters.harness import run_gateway, until_settled
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import BOT_USER, FakeSlack
from tests.harness.wait import until_count

T = TypeVar("T")


def run(home: Path, fake_llm: FakeOpenAI, slack: FakeSlack, body: Callable[[], Awaitable[T]]) -> T:
    def adapter(_menu: list[MenuEntry]) -> SlackAdapter:
        return SlackAdapter("xoxb-test", "xapp-test", api_base=slack.api_base)

    return run_gateway(home, fake_llm, adapter, body, ready=slack.wait_connected)


async def until_posted(slack: FakeSlack, count: int, timeout: float = 20) -> list[dict[str, Any]]:
    return await until_count(slack.posted, count, "posted", timeout)


def test_dm_round_trip_with_mrkdwn_and_acks(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.default = Reply(text="Sure, **bold** move")

    async def body() -> list[dict[str, Any]]:
        await asyncio.to_thread(slack.message, "hello hermes")
        return await until_posted(slack, 1)

    posted = run(home, fake_llm, slack, body)
    assert posted[0]["channel"] == "D1" and posted[0]["text"] == "Sure, *bold* move"
    assert "thread_ts" not in posted[0] or posted[0]["thread_ts"] in (None, "")
    assert slack.acks  # every envelope acknowledged


def test_channel_mention_arrives_twice_and_is_answered_once_in_thread(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.default = Reply(text="on it")
    ts = f"{time.time():.6f}"  # now (an old ts would be answered as late)

    async def body() -> list[dict[str, Any]]:
        text = f"<@{BOT_USER}> can you help?"
        await asyncio.to_thread(slack.message, text, channel="C1", channel_type="channel", ts=ts)
        await asyncio.to_thread(slack.message, text, channel="C1", ts=ts, event_type="app_mention")
        await asyncio.to_thread(
            slack.message, "humans talking", channel="C1", channel_type="channel"
        )
        await until_settled(3)  # the copy and the unaddressed message were handled too
        return await until_posted(slack, 1)

    posted = run(home, fake_llm, slack, body)
    assert len(posted) == 1 and posted[0]["thread_ts"] == ts
    assert len(fake_llm.requests) == 1
    assert fake_llm.requests[0]["messages"][-1]["content"].startswith("can you help?")


def test_a_file_asked_for_in_a_channel_goes_into_the_thread_with_the_reply(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    """files_upload_v2 shares the file where the reply goes: the mention's thread."""
    ts = f"{time.time():.6f}"
    fake_llm.push(Reply.tool_call("send_file", {"name": "todo.md", "content": "- [ ] milk"}))
    fake_llm.push(Reply(text="Here it is."))

    async def body() -> list[dict[str, Any]]:
        text = f"<@{BOT_USER}> a todo file please"
        await asyncio.to_thread(slack.message, text, channel="C1", channel_type="channel", ts=ts)
        return await until_posted(slack, 1)

    posted = run(home, fake_llm, slack, body)
    assert posted[0]["thread_ts"] == ts and posted[0]["text"] == "Here it is."
    assert slack.shared == [("C1", "todo.md", b"- [ ] milk", "", ts)]


def test_a_burst_at_connection_reaches_the_gateway_in_the_order_sent(slack: FakeSlack) -> None:
    """Right after connecting (a restart, with Slack redelivering what waited), events
    arrive together. Bolt authorizes each before its listener runs; the bot's identity is
    asked of Slack once, at start, never per event: answers to several auth.test calls
    come back in any order, and the events with them."""
    slack.latency["auth.test"] = deque([0.0, *(0.6 - 0.05 * n for n in range(12))])
    seen: list[str] = []

    async def sink(event: MessageEvent) -> None:
        seen.append(event.text)

    async def body() -> None:
        adapter = SlackAdapter("xoxb-test", "xapp-test", api_base=slack.api_base)
        await adapter.start(sink)
        try:
            await asyncio.to_thread(slack.wait_connected)
            for n in range(12):
                await asyncio.to_thread(slack.message, f"m{n}", user=f"U{n % 3}")
            await until_count(lambda: seen, 12, "events", 20)
        finally:
            await adapter.stop()

    asyncio.run(body())
    assert seen == [f"m{n}" for n in range(12)]
    assert [m for m, _ in slack.calls].count("auth.test") == 1


def test_to_event_is_pure() -> None:
    body = {
        "event_id": "Ev1",
        "event": {
            "type": "message",
            "channel": "C9",
            "channel_type": "channel",
            "user": "U5",
            "text": f"<@{BOT_USER}> hi",
            "ts": "1.2",
        },
    }
    event = to_event(body, BOT_USER)
    assert (
        event is not None
        and event.text == "hi"
        and event.mentioned
        and event.message_id == "C9:1.2"
    )
    bot = {"event": {"type": "message", "channel": "C9", "bot_id": "B1", "text": "x", "ts": "1.3"}}
    assert to_event(bot, BOT_USER) is None


def test_hermes_slash_command_runs_the_command(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async def body() -> list[dict[str, Any]]:
        await asyncio.to_thread(slack.slash_command, "help")
        await until_posted(slack, 1)
        await asyncio.to_thread(slack.slash_command, "memory why tea", channel="D1")
        await until_posted(slack, 2)
        mention = f"<@{BOT_USER}> /whoami"  # a text command, addressed by a mention
        await asyncio.to_thread(slack.message, mention, channel="C1", channel_type="channel")
        return await until_posted(slack, 3)

    posted = run(home, fake_llm, slack, body)
    assert "Commands" in posted[0]["text"] and fake_llm.requests == []
    assert posted[1]["text"].startswith("No recorded change mentions")
    assert "You are" in posted[2]["text"] and "slack" in posted[2]["text"]
    assert len(slack.acks) >= 1
