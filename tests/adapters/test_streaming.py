"""Streamed replies on every platform: the real SDKs against the fakes, faults included.

Each test runs once per platform. What must hold whatever happens mid-stream: one
message (more only when the reply outgrows one), edited in place at most once per
interval and never to the text it already shows, finished with exactly the final text
as the platform renders it, and the reply stored once.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.discord.adapter import DiscordAdapter
from adapters.slack.adapter import SlackAdapter
from adapters.slack.render import to_slack_mrkdwn
from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.render import to_telegram_html
from gateway.edge.ports import MenuEntry, PlatformAdapter
from gateway.pipeline.streaming import CURSOR
from hermes.state.db import SessionDB
from tests.adapters.harness import run_gateway
from tests.apps import app_config
from tests.fakes.discord_server import DiscordFault, FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack, SlackFault
from tests.fakes.telegram_server import FakeTelegram, Fault
from tests.harness.wait import until

PLATFORMS = ["telegram", "slack", "discord"]
ANSWER = (
    "Here is the plan for **Monday**: first the bank, then the dentist at noon, and in the "
    "evening the call with Sam about the trip."
)


@dataclass
class Side:
    """One platform's fake, seen the same way by every test."""

    name: str
    user: str  # the person's platform id
    adapter: Callable[[list[MenuEntry]], PlatformAdapter]
    say: Callable[[str], None]
    posts: Callable[[], list[str]]  # every new message posted, as sent
    shown: Callable[[], list[str]]  # what the bot's messages show now, oldest first
    edit_times: Callable[[], list[float]]
    fault_next_edit: Callable[[], None]  # a 429 asking to wait 1 s
    render: Callable[[str], str]
    edit_texts: Callable[[], list[str]]
    ready: Callable[[], None] | None = None


def _telegram(tg: FakeTelegram) -> Side:
    return Side(
        "telegram",
        "42",
        lambda menu: TelegramAdapter("123:T", base_url=tg.base_url, poll_timeout=1, menu=menu),
        lambda text: tg.user_message(text, user_id=42) and None,
        lambda: [str(p["text"]) for p in tg.sent()],
        lambda: tg.shown(42),
        lambda: [at for method, at in tg.timeline if method == "editMessageText"],
        lambda: tg.faults.append(
            Fault("editMessageText", 429, "Too Many Requests: retry after 1", retry_after=1)
        ),
        to_telegram_html,
        lambda: [str(p["text"]) for p in tg.sent("editMessageText")],
    )


def _slack(slack: FakeSlack) -> Side:
    return Side(
        "slack",
        "U1",
        lambda menu: SlackAdapter("xoxb-t", "xapp-t", api_base=slack.api_base),
        lambda text: slack.message(text) and None,
        lambda: [str(p["text"]) for p in slack.posted()],
        lambda: [text for _, text in sorted(slack.messages.items())],
        lambda: [at for method, at in slack.timeline if method == "chat.update"],
        lambda: slack.faults.append(SlackFault("chat.update", 429, "ratelimited", 1)),
        to_slack_mrkdwn,
        lambda: [str(p["text"]) for m, p in slack.calls if m == "chat.update"],
        ready=slack.wait_connected,
    )


def _discord(fake: FakeDiscord) -> Side:
    return Side(
        "discord",
        "700000000000000001",
        lambda menu: DiscordAdapter(
            "bot-token", api_base=fake.api_base, gateway_url=fake.gateway_url, menu=menu
        ),
        lambda text: fake.message(text) and None,
        lambda: [str(p["content"]) for p in fake.posted],
        lambda: [
            text for (_, mid), text in sorted(fake.messages.items(), key=lambda i: int(i[0][1]))
        ],
        lambda: [at for what, at in fake.timeline if what.startswith("PATCH /channels")],
        lambda: fake.faults.append(DiscordFault("", 429, 1.0, method="PATCH")),
        lambda text: text,
        lambda: [str(e["content"]) for e in fake.edits],
    )


@pytest.fixture(params=PLATFORMS)
def side(
    request: pytest.FixtureRequest,
    telegram: FakeTelegram,
    slack: FakeSlack,
    discord_fake: FakeDiscord,
) -> Side:
    make = {"telegram": _telegram, "slack": _slack, "discord": _discord}[request.param]
    fake: Any = {"telegram": telegram, "slack": slack, "discord": discord_fake}[request.param]
    return make(fake)


def run(
    home: Path, fake_llm: FakeOpenAI, side: Side, body: Callable[[], Awaitable[Any]], **config: Any
) -> Any:
    return run_gateway(
        home, fake_llm, side.adapter, body, side.ready, config=app_config(fake_llm, **config)
    )


async def until_shown(side: Side, text: str, timeout: float = 20) -> None:
    rendered = side.render(text)
    await until(
        lambda: side.shown() == [rendered], f"never showed {rendered!r}: {side.shown()}", timeout
    )


def stored_replies(home: Path, side: Side) -> list[str]:
    db = SessionDB.open(home)
    try:
        user_id = db.people.user_for_identity(side.name, side.user)
        assert user_id is not None
        return [
            m.content
            for s in db.conversations.list_sessions(user_id)
            for m in db.conversations.messages(s.id, user_id)
            if m.role == "assistant" and m.content
        ]
    finally:
        db.close()


def slow(text: str, seconds: float, **kwargs: Any) -> Reply:
    """`text` streamed in word pieces over about `seconds`."""
    pieces = [word + " " for word in text.split(" ")]
    pieces[-1] = pieces[-1].rstrip()
    return Reply(text=text, pieces=pieces, piece_delay=seconds / len(pieces), **kwargs)


def test_a_reply_is_one_message_edited_in_place_at_most_once_a_second(
    home: Path, fake_llm: FakeOpenAI, side: Side
) -> None:
    fake_llm.push(slow(ANSWER, 3.5))

    async def body() -> None:
        side.say("what is the plan for monday?")
        await until_shown(side, ANSWER)
        await asyncio.sleep(0.3)  # nothing more comes

    run(home, fake_llm, side, body)
    posts = side.posts()
    assert len(posts) == 1, posts  # one message ...
    assert posts[0].endswith(CURSOR) and len(posts[0]) < len(side.render(ANSWER))  # ... early
    edits = side.edit_times()
    assert 2 <= len(edits) <= 6, edits  # edited as the text grew, not at every piece
    gaps = [b - a for a, b in itertools.pairwise(edits)]
    assert all(gap > 0.85 for gap in gaps[:-1]), gaps  # the final edit may follow at once
    texts = [posts[0], *side.edit_texts()]
    assert all(a != b for a, b in itertools.pairwise(texts)), texts  # never the same
    assert texts[-1] == side.render(ANSWER)
    assert stored_replies(home, side) == [ANSWER]  # stored once, the final text


def test_a_quick_reply_arrives_whole_without_edits(
    home: Path, fake_llm: FakeOpenAI, side: Side
) -> None:
    fake_llm.push(Reply(text="Quick **answer**."), Reply(text="Second."))

    async def body() -> None:
        side.say("hi")
        await until_shown(side, "Quick **answer**.")
        # the chat's next turn starts when the first one has ended, its reply finished:
        # an edit of the first would come before the second answer
        side.say("and?")
        both = [side.render("Quick **answer**."), side.render("Second.")]
        await until(lambda: side.shown() == both, lambda: f"shown: {side.shown()}")

    run(home, fake_llm, side, body)
    assert side.posts() == [side.render("Quick **answer**."), side.render("Second.")]
    assert side.edit_times() == []


def test_a_model_stream_that_breaks_off_ends_in_one_complete_reply(
    home: Path, fake_llm: FakeOpenAI, side: Side
) -> None:
    """The first stream is cut after some pieces were shown; the request is made again
    (whole) and the message ends showing that answer, once."""
    complete = "The whole answer, correct and complete, with nothing cut off."
    fake_llm.push(slow("The whole answer, cut", 1.6, break_after=5), Reply(text=complete))

    async def body() -> None:
        side.say("tell me")
        await until_shown(side, complete)

    run(home, fake_llm, side, body)
    assert len(side.posts()) == 1
    assert side.shown() == [side.render(complete)]
    assert stored_replies(home, side) == [complete]
    assert [bool(r.get("stream")) for r in fake_llm.requests] == [True, False]


def test_an_error_event_mid_stream_ends_in_one_complete_reply(
    home: Path, fake_llm: FakeOpenAI, side: Side
) -> None:
    complete = "Recovered answer."
    fake_llm.push(slow("Partial words that will stop here", 1.6, stream_error_after=5))
    fake_llm.push(Reply(text=complete))

    async def body() -> None:
        side.say("tell me")
        await until_shown(side, complete)

    run(home, fake_llm, side, body)
    assert len(side.posts()) == 1
    assert stored_replies(home, side) == [complete]


def test_a_rate_limited_edit_is_waited_out_and_the_reply_still_ends_exact(
    home: Path, fake_llm: FakeOpenAI, side: Side
) -> None:
    fake_llm.push(slow(ANSWER, 3.0))
    side.fault_next_edit()

    async def body() -> None:
        side.say("plan?")
        await until_shown(side, ANSWER)

    run(home, fake_llm, side, body)
    assert len(side.posts()) == 1
    assert side.shown() == [side.render(ANSWER)]
    assert stored_replies(home, side) == [ANSWER]


def test_tools_mid_turn_show_a_status_then_the_answer(
    home: Path, fake_llm: FakeOpenAI, side: Side
) -> None:
    search = Reply.tool_call("session_search", {"query": "bank"})
    search.delay = 1.3  # the status has time to show
    fake_llm.push(search, slow("You said you would call the bank on Monday.", 1.2))
    statuses: list[list[str]] = []

    async def body() -> None:
        side.say("what did I say about the bank?")
        deadline = time.monotonic() + 20
        while side.shown() != [side.render("You said you would call the bank on Monday.")]:
            assert time.monotonic() < deadline, side.shown()
            statuses.append(side.shown())
            await asyncio.sleep(0.05)

    run(home, fake_llm, side, body)
    seen = {text for shown in statuses for text in shown}
    assert any("searching past conversations" in text for text in seen), seen
    assert len(side.posts()) == 1


def test_a_reply_longer_than_one_message_continues_in_a_new_one(
    home: Path, fake_llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    """On Discord (2,000 characters: a limit a stream reaches quickly; the same code
    measures Telegram's 4,096 UTF-16 units and Slack's 40,000 through `parts`)."""
    side = _discord(discord_fake)
    paragraphs = [f"Paragraph {n}: " + "words and more words " * 12 for n in range(12)]
    long = "\n\n".join(p.strip() for p in paragraphs)
    assert len(long) > 2000
    fake_llm.push(slow(long, 2.5))

    async def body() -> None:
        side.say("a long one please")
        await until(
            lambda: (
                "".join(side.shown()).count("Paragraph") == 12
                and CURSOR not in "".join(side.shown())
            ),
            "never finished",
        )

    run(home, fake_llm, side, body)
    shown = side.shown()
    assert len(shown) == 2 and len(side.posts()) == 2
    assert all(len(text) <= 2000 for text in shown)
    assert "\n\n".join(shown) == long
    assert stored_replies(home, side) == [long]


def test_streaming_off_sends_each_reply_whole(home: Path, fake_llm: FakeOpenAI, side: Side) -> None:
    fake_llm.push(slow(ANSWER, 2.0))

    async def body() -> None:
        side.say("plan?")
        await until_shown(side, ANSWER)

    run(home, fake_llm, side, body, gateway={"streaming": False})
    assert side.posts() == [side.render(ANSWER)]
    assert side.edit_times() == []
    assert not fake_llm.requests[0].get("stream")


def test_stop_mid_stream_leaves_what_was_written_marked_stopped(
    home: Path, fake_llm: FakeOpenAI, side: Side
) -> None:
    fake_llm.push(slow(ANSWER, 6.0))

    async def body() -> None:
        side.say("plan?")
        await until(lambda: bool(side.shown()), "nothing shown")
        side.say("/stop")
        await until(
            lambda: any("stopped" in t for t in side.shown()), f"not stopped: {side.shown()}"
        )

    run(home, fake_llm, side, body)
    (shown,) = [t for t in side.shown() if "stopped" in t]
    assert CURSOR not in shown and shown.startswith(side.render("Here is the plan")[:10])
    assert len(side.posts()) == 2  # the reply, and the answer to /stop
