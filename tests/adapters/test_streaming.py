"""Streamed replies on every platform: the real SDKs against the fakes, faults included.

Each test runs once per platform. What must hold whatever happens mid-stream: one
message (more only when the reply outgrows one), edited in place at most once per
interval and never to the text it already shows, finished with exactly the final text
as the platform renders it, and the reply stored once.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.pipeline.streaming import CURSOR
from hermes.state.db import SessionDB
from tests.adapters.drivers import DiscordDriver, Driver, driver_for, platforms_with
from tests.adapters.harness import run_gateway
from tests.apps import app_config
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness.wait import until

PLATFORMS = ["telegram", "slack", "discord"]
ANSWER = (
    "Here is the plan for **Monday**: first the bank, then the dentist at noon, and in the "
    "evening the call with Sam about the trip."
)


@pytest.fixture(params=platforms_with("edit_times", "fault_next_edit", "render"))
def side(request: pytest.FixtureRequest) -> Driver:
    return driver_for(request)


def run(
    home: Path,
    fake_llm: FakeOpenAI,
    side: Driver,
    body: Callable[[], Awaitable[Any]],
    **config: Any,
) -> Any:
    return run_gateway(
        home, fake_llm, side.adapter, body, side.ready, config=app_config(fake_llm, **config)
    )


async def until_shown(side: Driver, text: str, timeout: float = 20) -> None:
    rendered = side.render(text)
    await until(
        lambda: side.shown() == [rendered], f"never showed {rendered!r}: {side.shown()}", timeout
    )


def stored_replies(home: Path, side: Driver) -> list[str]:
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
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    fake_llm.push(slow(ANSWER, 3.5))

    async def body() -> None:
        side.say(side.user, "what is the plan for monday?")
        await until_shown(side, ANSWER)
        await asyncio.sleep(0.3)  # nothing more comes

    run(home, fake_llm, side, body)
    posts = side.texts()
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
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    fake_llm.push(Reply(text="Quick **answer**."), Reply(text="Second."))

    async def body() -> None:
        side.say(side.user, "hi")
        await until_shown(side, "Quick **answer**.")
        # the chat's next turn starts when the first one has ended, its reply finished:
        # an edit of the first would come before the second answer
        side.say(side.user, "and?")
        both = [side.render("Quick **answer**."), side.render("Second.")]
        await until(lambda: side.shown() == both, lambda: f"shown: {side.shown()}")

    run(home, fake_llm, side, body)
    assert side.texts() == [side.render("Quick **answer**."), side.render("Second.")]
    assert side.edit_times() == []


def test_a_model_stream_that_breaks_off_ends_in_one_complete_reply(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    """The first stream is cut after some pieces were shown; the request is made again
    (whole) and the message ends showing that answer, once."""
    complete = "The whole answer, correct and complete, with nothing cut off."
    fake_llm.push(slow("The whole answer, cut", 1.6, break_after=5), Reply(text=complete))

    async def body() -> None:
        side.say(side.user, "tell me")
        await until_shown(side, complete)

    run(home, fake_llm, side, body)
    assert len(side.texts()) == 1
    assert side.shown() == [side.render(complete)]
    assert stored_replies(home, side) == [complete]
    assert [bool(r.get("stream")) for r in fake_llm.requests] == [True, False]


def test_an_error_event_mid_stream_ends_in_one_complete_reply(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    complete = "Recovered answer."
    fake_llm.push(slow("Partial words that will stop here", 1.6, stream_error_after=5))
    fake_llm.push(Reply(text=complete))

    async def body() -> None:
        side.say(side.user, "tell me")
        await until_shown(side, complete)

    run(home, fake_llm, side, body)
    assert len(side.texts()) == 1
    assert stored_replies(home, side) == [complete]


def test_a_rate_limited_edit_is_waited_out_and_the_reply_still_ends_exact(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    fake_llm.push(slow(ANSWER, 3.0))
    side.fault_next_edit()

    async def body() -> None:
        side.say(side.user, "plan?")
        await until_shown(side, ANSWER)

    run(home, fake_llm, side, body)
    assert len(side.texts()) == 1
    assert side.shown() == [side.render(ANSWER)]
    assert stored_replies(home, side) == [ANSWER]


def test_tools_mid_turn_show_a_status_then_the_answer(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    search = Reply.tool_call("session_search", {"query": "bank"})
    search.delay = 1.3  # the status has time to show
    fake_llm.push(search, slow("You said you would call the bank on Monday.", 1.2))
    statuses: list[list[str]] = []

    async def body() -> None:
        side.say(side.user, "what did I say about the bank?")
        deadline = time.monotonic() + 20
        while side.shown() != [side.render("You said you would call the bank on Monday.")]:
            assert time.monotonic() < deadline, side.shown()
            statuses.append(side.shown())
            await asyncio.sleep(0.05)

    run(home, fake_llm, side, body)
    seen = {text for shown in statuses for text in shown}
    assert any("searching past conversations" in text for text in seen), seen
    assert len(side.texts()) == 1


def test_a_reply_longer_than_one_message_continues_in_a_new_one(
    home: Path, fake_llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    """On Discord (2,000 characters: a limit a stream reaches quickly; the same code
    measures Telegram's 4,096 UTF-16 units and Slack's 40,000 through `parts`)."""
    side = DiscordDriver(discord_fake)
    paragraphs = [f"Paragraph {n}: " + "words and more words " * 12 for n in range(12)]
    long = "\n\n".join(p.strip() for p in paragraphs)
    assert len(long) > 2000
    fake_llm.push(slow(long, 2.5))

    async def body() -> None:
        side.say(side.user, "a long one please")
        await until(
            lambda: (
                "".join(side.shown()).count("Paragraph") == 12
                and CURSOR not in "".join(side.shown())
            ),
            "never finished",
        )

    run(home, fake_llm, side, body)
    shown = side.shown()
    assert len(shown) == 2 and len(side.texts()) == 2
    assert all(len(text) <= 2000 for text in shown)
    assert "\n\n".join(shown) == long
    assert stored_replies(home, side) == [long]


def test_streaming_off_sends_each_reply_whole(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    fake_llm.push(slow(ANSWER, 2.0))

    async def body() -> None:
        side.say(side.user, "plan?")
        await until_shown(side, ANSWER)

    run(home, fake_llm, side, body, gateway={"streaming": False})
    assert side.texts() == [side.render(ANSWER)]
    assert side.edit_times() == []
    assert not fake_llm.requests[0].get("stream")


def test_stop_mid_stream_leaves_what_was_written_marked_stopped(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    fake_llm.push(slow(ANSWER, 6.0))

    async def body() -> None:
        side.say(side.user, "plan?")
        await until(lambda: bool(side.shown()), "nothing shown")
        side.say(side.user, "/stop")
        await until(
            lambda: any("stopped" in t for t in side.shown()), f"not stopped: {side.shown()}"
        )

    run(home, fake_llm, side, body)
    (shown,) = [t for t in side.shown() if "stopped" in t]
    written = shown.split("stopped")[0].rstrip("(<i>_ \n")  # what the model had written
    # however far it came (a loaded machine may stop it after the first word)
    assert CURSOR not in shown and written.startswith("Here")
    plain = re.compile(r"</?b>|\*")  # (a cut may fall inside the bold word's markup)
    assert plain.sub("", ANSWER).startswith(plain.sub("", written)), written
    assert len(side.texts()) == 2  # the reply, and the answer to /stop
