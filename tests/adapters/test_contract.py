"""The adapter contract: one suite, run against every platform through its real SDK and
a local fake of the platform, inside the real gateway process (`Gateway`: registry,
composition root, adapters attached before they start).

Each platform brings its `Driver` (tests/adapters/drivers.py: how a person does things
there, how the platform misbehaves); the scenarios are written once, and each runs on the
platforms that have what it uses (the terminal, with one person and no files or
network, runs the round trip and the long reply). Platform-only behaviour (Telegram HTML,
Slack's double mention event, Discord intents) stays in each platform's own file.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from gateway.edge.platforms import CONFIGURED
from gateway.runtime import Gateway
from hermes.state.db import SessionDB
from tests.adapters.drivers import SERVED, CliDriver, Driver, driver_for, needs, platforms_with
from tests.adapters.harness import (
    BURST,
    RUNNING,
    burst_texts,
    check_burst,
    run_gateway,
    slow_echo,
    until_settled,
)
from tests.apps import app_config
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness.wait import until_count

T = TypeVar("T")
LONG = "\n\n".join(f"Paragraph {i}: " + "word " * 60 for i in range(35))  # > 10,000 chars


@pytest.fixture(params=platforms_with("say", "texts", "shown"))
def platform(request: pytest.FixtureRequest) -> Driver:
    return driver_for(request)


def run(
    home: Path,
    llm: FakeOpenAI,
    driver: Driver,
    body: Callable[[], Awaitable[T]],
    *,
    allow_all: bool = True,
) -> T:
    """The whole gateway with this one platform enabled, running `body`; the terminal,
    never configured, attached to the app as `hermes chat` attaches it."""
    if not driver.can("config"):
        return run_gateway(home, llm, driver.adapter, body)
    section = {"enabled": True, **driver.config()}
    if not allow_all:
        section["allowed_users"] = [driver.users[0]]
    config = app_config(
        llm,
        access={"allow_all": allow_all},
        platforms={driver.name: section},
        # whole replies: what is delivered, retried and chunked here is the finished text
        # (a slow machine would otherwise stream a first part; test_streaming.py covers that)
        gateway={"http": {"port": 0}, "streaming": False},
    )
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))

    async def go() -> T:
        db = SessionDB.open(home)
        gateway = Gateway(home, config, db, driver.env)
        await gateway.start()
        assert gateway.app is not None
        RUNNING.set(gateway.app)
        try:
            assert gateway.status() == {driver.name: "connected"}, gateway.status()
            await asyncio.to_thread(driver.ready)
            return await body()
        finally:
            await gateway.stop()
            db.close()

    return asyncio.run(go())


async def until(count: int, texts: Callable[[], list[str]], timeout: float = 20) -> list[str]:
    return await until_count(texts, count, "texts", timeout)


async def until_text(driver: Driver, text: str) -> None:
    """Until the bot has sent a message that is exactly `text`."""
    await until_count(lambda: [t for t in driver.texts() if t == text], 1, repr(text))


async def say(driver: Driver, text: str, user: str | None = None) -> Any:
    return await asyncio.to_thread(driver.say, user or driver.users[0], text)


# -- the scenarios -------------------------------------------------------------------------


def test_round_trip(home: Path, fake_llm: FakeOpenAI, platform: Driver) -> None:
    fake_llm.default = Reply(text="Hello from Hermes")

    async def body() -> list[str]:
        await say(platform, "hi there")
        await until(1, platform.texts)
        deadline = time.monotonic() + 20  # a streamed first post is edited to its end
        while platform.shown() != ["Hello from Hermes"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return platform.shown()

    assert run(home, fake_llm, platform, body) == ["Hello from Hermes"]
    assert fake_llm.requests[0]["messages"][-1]["content"].startswith("hi there")


@needs("redeliver")
def test_a_redelivery_is_answered_once(home: Path, fake_llm: FakeOpenAI, platform: Driver) -> None:
    async def body() -> None:
        handle = await say(platform, "just once")
        await until(1, platform.texts)
        await asyncio.to_thread(platform.redeliver, handle)
        # then a new message of the same chat: once it is answered, the copy before it
        # has been through intake (a copy let in would be answered first, in its lane)
        await say(platform, "and this")
        await until(2, platform.texts)

    run(home, fake_llm, platform, body)
    assert len(platform.texts()) == 2 and len(fake_llm.requests) == 2
    asked = [r["messages"][-1]["content"] for r in fake_llm.requests]
    assert asked[0].startswith("just once") and asked[1].startswith("and this")


@needs("fail_next_send")
def test_a_429_is_waited_out_and_the_reply_lands_once(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    fake_llm.default = Reply(text="patience pays")
    platform.fail_next_send(1.0)

    attempts = 2 if platform.records_refused else 1  # the refused one, then the one that landed

    async def body() -> float:
        started = time.monotonic()
        await say(platform, "hello")
        await until(attempts, platform.texts)
        elapsed = time.monotonic() - started
        await until_settled(1)  # the turn is over: no retry can still be under way
        return elapsed

    assert run(home, fake_llm, platform, body) >= 1.0
    assert platform.texts() == ["patience pays"] * attempts  # delivered once


@needs("fail_next_send_5xx")
def test_an_answered_server_error_is_retried_and_lands_once(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    fake_llm.default = Reply(text="second time lucky")
    platform.fail_next_send_5xx()
    attempts = 2 if platform.records_refused else 1

    async def body() -> None:
        await say(platform, "hello")
        await until(attempts, platform.texts, timeout=30)
        await until_settled(1)  # the turn is over: no retry can still be under way

    run(home, fake_llm, platform, body)
    assert platform.texts() == ["second time lucky"] * attempts


@needs("drop")
def test_a_dropped_connection_is_reconnected(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    async def body() -> None:
        await asyncio.to_thread(platform.drop)
        await say(platform, "are you back?")
        await until(1, platform.texts, timeout=30)

    run(home, fake_llm, platform, body)
    assert len(fake_llm.requests) == 1


@needs("texts_to")  # two people, each in their own chat
def test_two_people_five_messages_each_in_order(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    fake_llm.responder = slow_echo
    a, b = platform.users[:2]

    async def body() -> dict[str, list[str]]:
        for n in range(BURST):
            await say(platform, burst_texts(a)[n], a)
            await say(platform, burst_texts(b)[n], b)
        await until(2 * BURST, platform.texts, timeout=30)
        return {user: platform.texts_to(platform.dm_of(user)) for user in (a, b)}

    check_burst(home, platform.name, run(home, fake_llm, platform, body))


def test_a_long_reply_is_split_within_the_limit(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    fake_llm.push(Reply(text=LONG))
    fake_llm.default = Reply(text="the end")

    async def body() -> list[str]:
        await say(platform, "tell me everything")
        await until(1, platform.texts)
        # a reply's parts are all sent within its turn; the next message of the chat is
        # answered after them, so its answer marks the end of the parts
        await say(platform, "thanks")
        await until_text(platform, "the end")
        return platform.texts()[:-1]

    parts = run(home, fake_llm, platform, body)
    assert all(len(p) <= platform.limit for p in parts)
    assert (len(parts) == 1) == (len(LONG) <= platform.limit)  # Slack: one message
    assert " ".join(" ".join(parts).split()) == " ".join(LONG.split())


@needs("send_photo")
def test_a_file_that_cannot_be_used_gets_a_short_note_and_never_the_model(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    """A photo without text whose file the platform does not hand over (this driver's
    photos point nowhere): one short note saying so (tests/adapters/test_media.py has
    the photos that arrive)."""

    async def body() -> list[str]:
        await asyncio.to_thread(platform.send_photo, platform.users[0])
        return await until(1, platform.texts)

    (note,) = run(home, fake_llm, platform, body)
    assert ("couldn't" in note or "can't" in note) and len(note) < 300
    assert fake_llm.requests == []


@needs("send_photo")  # a stranger, on a platform with files
def test_a_stranger_gets_one_pairing_code_and_never_the_model(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    stranger = platform.users[2]

    async def body() -> list[str]:
        await say(platform, "let me in", stranger)
        await until(1, platform.texts)
        await say(platform, "please?", stranger)  # within the minute: silence
        await asyncio.to_thread(platform.send_photo, stranger)  # no-text: silence too
        await until_settled(3)  # all three were handled (dropped at intake)
        return platform.texts()

    texts = run(home, fake_llm, platform, body, allow_all=False)
    assert len(texts) == 1 and "hermes pairing approve" in texts[0]
    assert fake_llm.requests == []


@needs("config")  # a platform with a server to start against
def test_a_message_waiting_at_start_is_answered(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    """Sent while the adapter starts (Discord: during its command sync; elsewhere: before
    the first poll or socket frame): the router must already know the adapter."""
    fake_llm.default = Reply(text="good morning")
    fake = platform.fake
    if isinstance(fake, FakeDiscord):
        fake.sync_delay = 1.0

        def early() -> None:
            fake.sync_started.wait(20)
            fake.message("am I early?", user=platform.users[0])

        threading.Thread(target=early, daemon=True).start()
    elif platform.name in ("telegram", "matrix"):  # waiting in getUpdates, or unread
        platform.say(platform.users[0], "am I early?")  # in a room the bot never read

    async def body() -> list[str]:
        if platform.name in ("slack", "mattermost"):
            await say(platform, "am I early?")  # the first frame after connecting
        return await until(1, platform.texts)

    assert run(home, fake_llm, platform, body) == ["good morning"]


# Abilities a platform's driver does not have yet (none now)
NOT_YET: dict[str, set[str]] = {}


def test_every_platform_with_a_server_has_every_ability() -> None:
    """A driver that lost an ability would silently drop its platform from the suites
    that use it: each platform with a server can do everything a scenario asks for; the
    terminal has what a terminal has."""
    abilities = [
        name
        for name, value in vars(Driver).items()
        if callable(value) and not name.startswith("_") and name not in ("can", "replies", "ready")
    ]
    assert len(abilities) > 20
    served = [d.name for d in SERVED]
    assert sorted(served) == sorted(CONFIGURED)
    for driver in SERVED:  # what a platform cannot do yet is listed, and nothing else
        missing = {a for a in abilities if not driver.can(a)}
        assert missing == NOT_YET.get(driver.name, set()), (driver.name, missing)
    assert CliDriver.can("adapter", "say", "texts", "shown")
    assert not CliDriver.can("texts_to") and not CliDriver.can("send_photo")
