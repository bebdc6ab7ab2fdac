"""Slack end to end: the real slack-bolt in Socket Mode against a local fake Slack."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from adapters.slack_adapter import SlackAdapter, to_event
from gateway.ports import MenuEntry
from tests.adapters.harness import BURST, burst_texts, check_burst, run_gateway, slow_echo
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import BOT_USER, FakeSlack, SlackFault

T = TypeVar("T")


def run(home: Path, fake_llm: FakeOpenAI, slack: FakeSlack, body: Callable[[], Awaitable[T]]) -> T:
    def adapter(_menu: list[MenuEntry]) -> SlackAdapter:
        return SlackAdapter("xoxb-test", "xapp-test", api_base=slack.api_base)

    return run_gateway(home, fake_llm, adapter, body, ready=slack.wait_connected)


async def until_posted(slack: FakeSlack, count: int, timeout: float = 20) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(slack.posted()) < count:
        assert time.monotonic() < deadline, f"only {len(slack.posted())} of {count} posted"
        await asyncio.sleep(0.05)
    return slack.posted()


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

    async def body() -> list[dict[str, Any]]:
        ts = "1700000001.000100"
        text = f"<@{BOT_USER}> can you help?"
        await asyncio.to_thread(slack.message, text, channel="C1", channel_type="channel", ts=ts)
        await asyncio.to_thread(slack.message, text, channel="C1", ts=ts, event_type="app_mention")
        await asyncio.to_thread(
            slack.message, "humans talking", channel="C1", channel_type="channel"
        )
        posted = await until_posted(slack, 1)
        await asyncio.sleep(1.0)
        return posted

    posted = run(home, fake_llm, slack, body)
    assert len(posted) == 1 and posted[0]["thread_ts"] == "1700000001.000100"
    assert len(fake_llm.requests) == 1
    assert fake_llm.requests[0]["messages"][-1]["content"].startswith("can you help?")


def test_redelivered_event_is_answered_once(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async def body() -> None:
        original = await asyncio.to_thread(slack.message, "just once")
        await until_posted(slack, 1)
        await asyncio.to_thread(slack.push, original, 1)  # Slack's retry of the same event
        await asyncio.sleep(1.0)

    run(home, fake_llm, slack, body)
    assert len(slack.posted()) == 1 and len(fake_llm.requests) == 1


def test_429_then_success(home: Path, fake_llm: FakeOpenAI, slack: FakeSlack) -> None:
    slack.faults.append(SlackFault("chat.postMessage", 429, "ratelimited", retry_after=1))

    async def body() -> float:
        started = time.monotonic()
        await asyncio.to_thread(slack.message, "hi")
        await until_posted(slack, 2)
        return time.monotonic() - started

    assert run(home, fake_llm, slack, body) >= 1.0
    assert len(slack.posted()) == 2  # the refused attempt and the one that landed


def test_reconnects_after_the_socket_drops(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    async def body() -> None:
        await asyncio.to_thread(slack.drop_connections)
        await asyncio.to_thread(slack.wait_connected, 2, 30)
        await asyncio.to_thread(slack.message, "are you back?")
        await until_posted(slack, 1, timeout=30)

    run(home, fake_llm, slack, body)
    assert slack.connections >= 2


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


def test_two_people_sending_five_messages_each_get_answers_in_order(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.responder = slow_echo
    people = {"U1": "D1", "U2": "D2"}

    async def body() -> dict[str, list[str]]:
        for a, b in zip(burst_texts("U1"), burst_texts("U2"), strict=True):
            await asyncio.to_thread(slack.message, a, user="U1", channel="D1")
            await asyncio.to_thread(slack.message, b, user="U2", channel="D2")
        posted = await until_posted(slack, 2 * BURST)
        return {u: [p["text"] for p in posted if p["channel"] == c] for u, c in people.items()}

    check_burst(home, "slack", run(home, fake_llm, slack, body))


def test_ten_thousand_characters_fit_one_slack_message(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    long = "\n\n".join(f"Paragraph {n}: " + "words " * 30 for n in range(60))
    assert len(long) > 10_000
    fake_llm.default = Reply(text=long)

    async def body() -> list[dict[str, Any]]:
        await asyncio.to_thread(slack.message, "write a lot")
        posted = await until_posted(slack, 1)
        await asyncio.sleep(0.5)
        return posted

    posted = run(home, fake_llm, slack, body)
    assert len(posted) == 1  # under Slack's 40,000 characters: one message, nothing lost
    assert posted[0]["text"].count("Paragraph") == 60
