"""Discord end to end: the real discord.py against a local fake REST API and gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from adapters.discord.adapter import DiscordAdapter, to_event
from gateway.edge.ports import MenuEntry
from tests.adapters.harness import run_gateway
from tests.fakes.discord_server import BOT_ID, MESSAGE_CONTENT_INTENT, FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness.wait import until_count

T = TypeVar("T")


def run(home: Path, fake_llm: FakeOpenAI, fake: FakeDiscord, body: Callable[[], Awaitable[T]]) -> T:
    def adapter(menu: list[MenuEntry]) -> DiscordAdapter:
        return DiscordAdapter(
            "bot-token", api_base=fake.api_base, gateway_url=fake.gateway_url, menu=menu
        )

    return run_gateway(home, fake_llm, adapter, body)


async def until_posted(fake: FakeDiscord, count: int, timeout: float = 20) -> list[dict[str, Any]]:
    return await until_count(lambda: fake.posted, count, "posted", timeout)


def test_dm_round_trip_with_the_message_content_intent(
    home: Path, fake_llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    fake_llm.default = Reply(text="Hello from **Hermes**", delay=0.6)  # slow: typing shows

    async def body() -> list[dict[str, Any]]:
        await asyncio.to_thread(discord_fake.message, "hi there")
        return await until_posted(discord_fake, 1)

    posted = run(home, fake_llm, discord_fake, body)
    assert posted[0]["content"] == "Hello from **Hermes**"  # Discord takes Markdown as is
    assert posted[0]["message_reference"]["message_id"]
    assert int(discord_fake.identifies[0]["intents"]) & MESSAGE_CONTENT_INTENT
    assert discord_fake.typing


def test_guild_channel_needs_a_mention(
    home: Path, fake_llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    fake_llm.default = Reply(text="yes?")

    async def body() -> list[dict[str, Any]]:
        await asyncio.to_thread(discord_fake.message, "people chatting", guild=True)
        await asyncio.to_thread(
            discord_fake.message, f"<@{BOT_ID}> a question", guild=True, mention=True
        )
        posted = await until_posted(discord_fake, 1)
        await asyncio.sleep(0.5)
        return posted

    posted = run(home, fake_llm, discord_fake, body)
    assert len(posted) == 1 and len(fake_llm.requests) == 1
    assert fake_llm.requests[0]["messages"][-1]["content"].startswith("a question")


def test_to_event_is_pure() -> None:
    data = {
        "id": "5",
        "channel_id": "7",
        "guild_id": "9",
        "content": f"<@!{BOT_ID}> hey",
        "author": {"id": "3", "username": "ann"},
        "mentions": [{"id": BOT_ID}],
    }
    event = to_event(data, BOT_ID)
    assert (
        event is not None and event.text == "hey" and event.mentioned and event.message_id == "7:5"
    )


def test_slash_commands_are_registered_and_answered(
    home: Path, fake_llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    async def body() -> list[dict[str, Any]]:
        await asyncio.to_thread(discord_fake.slash, "help")
        await until_posted(discord_fake, 1)
        await asyncio.to_thread(discord_fake.slash, "memory", text="show  user")
        return await until_posted(discord_fake, 2)

    posted = run(home, fake_llm, discord_fake, body)
    names = [c["name"] for c in discord_fake.commands]
    assert names[:4] == ["help", "whoami", "new", "stop"] and "admin" in names
    memory = next(c for c in discord_fake.commands if c["name"] == "memory")
    assert [(o["name"], o.get("required", False)) for o in memory["options"]] == [("text", False)]
    assert discord_fake.interaction_replies and "Commands" in posted[0]["content"]
    assert "User profile" in posted[1]["content"]  # `/memory show user`, argument and all
    assert fake_llm.requests == []


def test_a_replayed_message_is_answered_once_and_threads_get_their_reply(
    home: Path, fake_llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    fake_llm.default = Reply(text="once")
    thread_channel = "900000000000000077"  # a Discord thread is a channel of its own

    async def body() -> list[dict[str, Any]]:
        data = await asyncio.to_thread(discord_fake.message, "only once please")
        await asyncio.to_thread(discord_fake.dispatch, "MESSAGE_CREATE", data)  # a replay
        await until_posted(discord_fake, 1)
        await asyncio.to_thread(
            discord_fake.message,
            f"<@{BOT_ID}> in the thread",
            guild=True,
            mention=True,
            channel=thread_channel,
        )
        posted = await until_posted(discord_fake, 2)
        await asyncio.sleep(0.5)
        return posted

    posted = run(home, fake_llm, discord_fake, body)
    assert len(posted) == 2 and len(fake_llm.requests) == 2
    assert posted[1]["channel_id"] == thread_channel
