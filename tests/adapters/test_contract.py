"""The adapter contract: one suite, run against every platform through its real SDK and
a local fake of the platform, inside the real gateway process (`Gateway`: registry,
composition root, adapters attached before they start).

Each platform brings a `Driver` that says how a person does things there (write, send a
photo, have a delivery redelivered) and how the platform misbehaves (a 429, a dropped
connection); the scenarios are written once. Platform-only behaviour (Telegram HTML,
Slack's double mention event, Discord intents) stays in each platform's own file.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from gateway.runtime import Gateway
from hermes.state.db import SessionDB
from tests.adapters.harness import (
    BURST,
    RUNNING,
    burst_texts,
    check_burst,
    slow_echo,
    until_settled,
)
from tests.apps import app_config
from tests.fakes.discord_server import DiscordFault, FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack, SlackFault
from tests.fakes.telegram_server import FakeTelegram, Fault
from tests.harness.wait import until_count

T = TypeVar("T")
LONG = "\n\n".join(f"Paragraph {i}: " + "word " * 60 for i in range(35))  # > 10,000 chars


@dataclass
class Driver:
    """How one platform is driven in the contract scenarios (all calls are blocking)."""

    name: str
    limit: int  # characters per message, as the platform counts them
    section: dict[str, Any]  # its platforms.<name> config
    env: dict[str, str]
    users: tuple[str, str]  # two people's platform ids
    say: Callable[[str, str], Any]  # (user, text) -> what `redeliver` needs
    redeliver: Callable[[Any], None]
    send_photo: Callable[[str], None]
    texts: Callable[[], list[str]]  # every send the bot attempted, in order
    fail_next_send: Callable[[float], None]  # a 429 asking to wait this long
    fail_next_send_5xx: Callable[[], None]  # an answered server error (502)
    drop: Callable[[], None]  # the connection drops; returns once reconnected
    connected: Callable[[], None] = lambda: None  # blocks until the adapter is listening
    records_refused: bool = True  # `texts` includes a send the platform refused (429)
    stopper: Callable[[], None] = lambda: None
    state: dict[str, Any] = field(default_factory=dict)
    # what the bot's messages show now, in the order posted (a streamed reply edited to
    # its end; a deleted one gone)
    shown: Callable[[], list[str]] = lambda: []

    def replies_to(self, user: str) -> list[str]:
        return self.state["replies_to"](user)


def _telegram() -> Driver:
    tg = FakeTelegram().start()

    def say(user: str, text: str) -> Any:
        return tg.user_message(text, user_id=int(user))

    def drop() -> None:
        tg.faults.append(Fault("getUpdates", drop=True))
        tg.faults.append(Fault("getUpdates", 502, "Bad Gateway"))
        time.sleep(0.5)

    driver = Driver(
        name="telegram",
        limit=4096,
        section={"token_env": "TG_TOKEN", "base_url": tg.base_url},
        env={"TG_TOKEN": "123:ABC"},
        users=("42", "43"),
        say=say,
        redeliver=tg.redeliver,
        send_photo=lambda user: tg.user_message(
            "",
            user_id=int(user),
            extra={"photo": [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}]},
        ),
        texts=lambda: [str(p["text"]) for p in tg.sent()],
        shown=lambda: list(tg.messages.values()),
        fail_next_send=lambda s: tg.faults.append(
            Fault("sendMessage", 429, "Too Many Requests", retry_after=int(s))
        ),
        fail_next_send_5xx=lambda: tg.faults.append(Fault("sendMessage", 502, "Bad Gateway")),
        drop=drop,
        stopper=tg.stop,
    )
    driver.state["replies_to"] = lambda user: [
        str(p["text"]) for p in tg.sent() if str(p["chat_id"]) == user
    ]
    return driver


def _slack() -> Driver:
    slack = FakeSlack().start()

    def say(user: str, text: str) -> Any:
        return slack.message(text, user=user, channel=f"D{user}")

    def photo(user: str) -> None:
        ts = f"1700000999.{time.monotonic_ns() % 1_000_000:06d}"
        event = {
            "type": "message",
            "user": user,
            "text": "",
            "ts": ts,
            "channel": f"D{user}",
            "channel_type": "im",
            "event_ts": ts,
            "files": [{"id": "F1", "name": "cat.png"}],
        }
        body = {"type": "event_callback", "event": event, "event_id": f"EvP{ts}"}
        slack.push({"token": "x", "team_id": "T1", "api_app_id": "A1", **body})

    def drop() -> None:
        before = slack.connections
        slack.drop_connections()
        slack.wait_connected(before + 1, 30)

    driver = Driver(
        name="slack",
        limit=40_000,
        section={"api_base": slack.api_base},
        env={"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_APP_TOKEN": "xapp-t"},
        users=("U1", "U2"),
        say=say,
        redeliver=lambda body: slack.push(body, 1),
        send_photo=photo,
        texts=lambda: [str(p["text"]) for p in slack.posted()],
        shown=lambda: list(slack.messages.values()),
        fail_next_send=lambda s: slack.faults.append(
            SlackFault("chat.postMessage", 429, "ratelimited", retry_after=int(s))
        ),
        fail_next_send_5xx=lambda: slack.faults.append(
            SlackFault("chat.postMessage", 502, "bad_gateway", retry_after=None)
        ),
        drop=drop,
        connected=slack.wait_connected,
        stopper=slack.stop,
    )
    driver.state["replies_to"] = lambda user: [
        str(p["text"]) for p in slack.posted() if p["channel"] == f"D{user}"
    ]
    return driver


def _discord() -> Driver:
    fake = FakeDiscord().start()

    def say(user: str, text: str) -> Any:
        return fake.message(text, user=user)

    def drop() -> None:
        before = len(fake.identifies) + fake.resumes
        fake.drop_connections()
        fake.wait_ready(before + 1, 30)

    driver = Driver(
        name="discord",
        limit=2000,
        section={
            "token_env": "DISCORD_TOKEN",
            "api_base": fake.api_base,
            "gateway_url": fake.gateway_url,
        },
        env={"DISCORD_TOKEN": "bot-token"},
        users=("700000000000000001", "700000000000000002"),
        say=say,
        redeliver=lambda data: fake.dispatch("MESSAGE_CREATE", data),
        send_photo=lambda user: fake.message(
            "", user=user, attachments=[{"id": "9", "filename": "cat.png", "size": 10}]
        ),
        texts=lambda: [str(p["content"]) for p in fake.posted],
        shown=lambda: list(fake.messages.values()),
        fail_next_send=lambda s: fake.faults.append(DiscordFault("/messages", 429, s)),
        fail_next_send_5xx=lambda: fake.faults.append(DiscordFault("/messages", 502, 0)),
        drop=drop,
        records_refused=False,  # discord.py waits out the 429 itself
        stopper=fake.stop,
    )
    driver.state["replies_to"] = lambda user: [
        str(p["content"]) for p in fake.posted if p.get("channel_id") == f"6{user[1:]}"
    ]
    driver.state["fake"] = fake
    return driver


@pytest.fixture(params=[_telegram, _slack, _discord], ids=["telegram", "slack", "discord"])
def platform(request: pytest.FixtureRequest) -> Iterator[Driver]:
    driver: Driver = request.param()
    yield driver
    driver.stopper()


def run(
    home: Path,
    llm: FakeOpenAI,
    driver: Driver,
    body: Callable[[], Awaitable[T]],
    *,
    allow_all: bool = True,
) -> T:
    """The whole gateway with this one platform enabled, running `body`."""
    section = {"enabled": True, **driver.section}
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
            await asyncio.to_thread(driver.connected)
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


def test_a_dropped_connection_is_reconnected(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    async def body() -> None:
        await asyncio.to_thread(platform.drop)
        await say(platform, "are you back?")
        await until(1, platform.texts, timeout=30)

    run(home, fake_llm, platform, body)
    assert len(fake_llm.requests) == 1


def test_two_people_five_messages_each_in_order(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    fake_llm.responder = slow_echo
    a, b = platform.users

    async def body() -> dict[str, list[str]]:
        for n in range(BURST):
            await say(platform, burst_texts(a)[n], a)
            await say(platform, burst_texts(b)[n], b)
        await until(2 * BURST, platform.texts, timeout=30)
        return {user: platform.replies_to(user) for user in (a, b)}

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


def test_a_stranger_gets_one_pairing_code_and_never_the_model(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    stranger = platform.users[1]

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


def test_a_message_waiting_at_start_is_answered(
    home: Path, fake_llm: FakeOpenAI, platform: Driver
) -> None:
    """Sent while the adapter starts (Discord: during its command sync; elsewhere: before
    the first poll or socket frame): the router must already know the adapter."""
    fake_llm.default = Reply(text="good morning")
    fake = platform.state.get("fake")
    if isinstance(fake, FakeDiscord):
        fake.sync_delay = 1.0

        def early() -> None:
            fake.sync_started.wait(20)
            fake.message("am I early?", user=platform.users[0])

        threading.Thread(target=early, daemon=True).start()
    elif platform.name == "telegram":
        platform.say(platform.users[0], "am I early?")  # waiting in getUpdates already

    async def body() -> list[str]:
        if platform.name == "slack":
            await say(platform, "am I early?")  # the first frame after connecting
        return await until(1, platform.texts)

    assert run(home, fake_llm, platform, body) == ["good morning"]
