"""Discord end to end: the real discord.py against a local fake REST API and gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from adapters.discord.adapter import DiscordAdapter, to_event
from gateway.config import load_config
from gateway.edge.ports import MenuEntry
from gateway.runtime import Gateway
from hermes.state.db import SessionDB
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


def test_messages_sent_while_the_gateway_was_down_are_answered_once_in_order_at_its_start(
    home: Path, fake_llm: FakeOpenAI, discord_fake: FakeDiscord, database_url: str | None
) -> None:
    """Discord replays nothing to a new gateway session: what a person sent while the
    gateway restarted is fetched from the channel's history at the start (after the last
    message read there), answered once and in order; a start after that answers nothing
    again; a channel that is gone is skipped."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake_llm.base_url}\n  model: m\n  max_retries: 0\n"
        + (f"database:\n  url: '{database_url}'\n" if database_url else "")
        + "memory:\n  review_interval: 0\naccess:\n  allow_all: true\n"
        "platforms:\n  discord:\n    enabled: true\n    token_env: DISCORD_TEST_TOKEN\n"
        f"    api_base: {discord_fake.api_base}\n    gateway_url: {discord_fake.gateway_url}\n"
        "gateway:\n  http:\n    port: 0\n  streaming: false\n"
    )
    fake_llm.responder = lambda body: Reply(text="re " + body["messages"][-1]["content"][:6])
    ann, bob = "700000000000000001", "700000000000000002"

    def answers() -> list[str]:
        return [str(p.get("content", "")) for p in discord_fake.posted]

    async def running(body: Callable[[], Awaitable[None]]) -> None:
        db = SessionDB.open(home, database_url)
        gateway = Gateway(home, load_config(home), db, {"DISCORD_TEST_TOKEN": "bot-token"})
        await gateway.start()
        try:
            await body()
        finally:
            await gateway.stop()
            db.close()

    async def first() -> None:
        for user, text in ((ann, "ann-1"), (bob, "bob-1")):
            await asyncio.to_thread(discord_fake.message, text, user=user)
        await until_count(answers, 2, "answers")

    asyncio.run(running(first))
    for user, text in ((ann, "ann-2"), (ann, "ann-3"), (bob, "bob-2")):  # nobody connected
        discord_fake.message(text, user=user, live=False)

    async def second() -> None:
        await until_count(answers, 5, "answers")
        await asyncio.sleep(0.5)  # nothing more comes

    asyncio.run(running(second))
    assert sorted(answers()[:2]) == ["re ann-1", "re bob-1"]
    caught = answers()[2:]
    assert sorted(caught) == ["re ann-2", "re ann-3", "re bob-2"]
    assert caught.index("re ann-2") < caught.index("re ann-3")  # in order
    discord_fake.gone_channels.add(f"6{bob[1:]}")  # bob's DM is gone: skipped
    discord_fake.message("ann-4", user=ann, live=False)

    async def third() -> None:
        await until_count(answers, 6, "answers")
        await asyncio.sleep(0.5)

    asyncio.run(running(third))
    assert answers()[5:] == ["re ann-4"]  # nothing answered twice


def test_the_fakes_history_pages_as_discord_py_reads_it(discord_fake: FakeDiscord) -> None:
    """discord.py's own `history()` iterator (after and before, page after page of 100)
    reads the fake's channel history whole and in order: the fake answers as Discord."""
    import discord

    channel = "600000000000000009"
    sent = [
        int(discord_fake.message(f"m{n}", channel=channel, live=False)["id"]) for n in range(250)
    ]
    DiscordAdapter("bot-token", api_base=discord_fake.api_base)  # points discord.py at the fake

    async def read() -> tuple[list[int], list[int], list[int]]:
        client = discord.Client(intents=discord.Intents.default())
        await client.login("bot-token")
        try:
            where = client.get_partial_messageable(int(channel))
            after = [m.id async for m in where.history(after=discord.Object(sent[9]), limit=None)]
            before = [m.id async for m in where.history(before=discord.Object(sent[-1]), limit=120)]
            latest = [m.id async for m in where.history(limit=3)]
            return after, before, latest
        finally:
            await client.close()

    after, before, latest = asyncio.run(read())
    assert after == sent[10:]  # oldest first, as discord.py gives `after`
    assert before == list(reversed(sent[-121:-1]))  # newest first
    assert latest == list(reversed(sent[-3:]))
