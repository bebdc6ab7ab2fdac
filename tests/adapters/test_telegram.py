"""Telegram end to end: the real python-telegram-bot against a local fake Bot API."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from telegram.error import TimedOut

from adapters.telegram.adapter import TelegramAdapter, _outcome, to_event
from gateway.config import HermesConfig
from gateway.edge.chunking import utf16_length
from gateway.edge.events import ChatRef, ChatType, OutboundMessage, SendResult
from gateway.edge.ports import MenuEntry
from hermes.state.db import SessionDB
from tests.adapters.harness import run_gateway, slow_echo
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import BOT, FakeTelegram, Fault
from tests.harness.wait import until_count

T = TypeVar("T")


def run(
    home: Path,
    fake_llm: FakeOpenAI,
    tg: FakeTelegram,
    body: Callable[[], Awaitable[T]],
    config: HermesConfig | None = None,
) -> T:
    def adapter(menu: list[MenuEntry]) -> TelegramAdapter:
        return TelegramAdapter("123:TEST", base_url=tg.base_url, poll_timeout=1, menu=menu)

    return run_gateway(home, fake_llm, adapter, body, config=config)


async def until_sent(tg: FakeTelegram, count: int, timeout: float = 20) -> list[dict[str, Any]]:
    return await until_count(tg.sent, count, "sent", timeout)


def text_of(params: dict[str, Any]) -> str:
    return str(params["text"])


def test_dm_round_trip_with_html_and_registered_commands(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    fake_llm.default = Reply(text="Hello **there** <friend>", delay=0.6)  # slow: typing shows

    async def body() -> list[dict[str, Any]]:
        telegram.user_message("hi bot")
        return await until_sent(telegram, 1)

    sent = run(home, fake_llm, telegram, body)
    assert (
        text_of(sent[0]) == "Hello <b>there</b> &lt;friend&gt;" and sent[0]["parse_mode"] == "HTML"
    )
    assert sent[0]["reply_parameters"]["message_id"] > 0
    commands = telegram.sent("setMyCommands")[0]["commands"]
    names = [c["command"] for c in commands]
    assert names[:3] == ["help", "whoami", "new"] and {"memory", "link", "admin"} <= set(names)
    assert telegram.sent("sendChatAction")  # typing indicator
    user_turn = fake_llm.requests[0]["messages"][-1]["content"]
    assert user_turn.startswith("hi bot\n\n[context: telegram dm")


def test_groups_answer_mentions_and_own_commands_only(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    fake_llm.default = Reply(text="ok")
    mention = "@hermes_test_bot what's the plan?"

    async def body() -> list[dict[str, Any]]:
        telegram.user_message("chatter between humans", chat_id=-100, chat_type="supergroup")
        telegram.user_message("/help@some_other_bot", chat_id=-100, chat_type="supergroup")
        telegram.user_message(
            mention,
            chat_id=-100,
            chat_type="supergroup",
            entities=[{"type": "mention", "offset": 0, "length": 16}],
        )
        telegram.user_message("/help@hermes_test_bot", chat_id=-100, chat_type="supergroup")
        telegram.user_message(
            "a reply to you", chat_id=-100, chat_type="supergroup", reply_to_bot=True
        )
        sent = await until_sent(telegram, 3)
        await asyncio.sleep(0.5)
        return sent

    sent = run(home, fake_llm, telegram, body)
    assert len(sent) == 3 and len(fake_llm.requests) == 2  # mention + reply; /help needs no LLM
    assert "Commands" in text_of(sent[1]) or "Commands" in text_of(sent[0])


def test_unparseable_html_falls_back_to_plain_text(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    fake_llm.default = Reply(text="**bold** answer")
    telegram.faults.append(
        Fault("sendMessage", 400, "Bad Request: can't parse entities: unclosed tag")
    )

    async def body() -> list[dict[str, Any]]:
        telegram.user_message("format me")
        return await until_sent(telegram, 2)

    first, second = run(home, fake_llm, telegram, body)
    assert first["parse_mode"] == "HTML" and "parse_mode" not in second
    assert text_of(second) == "**bold** answer"


def test_ten_thousand_characters_are_chunked(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    long = "\n\n".join(f"Paragraph {i}: " + "ünïcödé 🙂 word " * 40 for i in range(17))
    assert len(long) > 10_000
    fake_llm.push(Reply(text=long), Reply(text="the end"))

    async def body() -> list[dict[str, Any]]:
        telegram.user_message("write a lot")
        await until_sent(telegram, 3)
        # a reply's parts are all sent within its turn: the chat's next answer marks
        # the end of them
        telegram.user_message("thanks")
        await until_count(lambda: [p for p in telegram.sent() if text_of(p) == "the end"], 1, "end")
        return telegram.sent()[:-1]

    # whole replies: what is chunked is the finished text (a loaded machine would
    # otherwise stream a first part; test_streaming.py covers streaming)
    config = app_config(fake_llm, gateway={"streaming": False})
    sent = run(home, fake_llm, telegram, body, config=config)
    assert all(utf16_length(text_of(p)) <= 4096 for p in sent)
    assert " ".join(" ".join(text_of(p) for p in sent).split()) == " ".join(long.split())


def test_a_memory_written_in_a_telegram_turn_reaches_the_file(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    fake_llm.push(
        Reply.tool_call("memory", {"action": "add", "target": "user", "content": "Lives in Busan"}),
        Reply(text="Noted!"),
    )

    async def body() -> None:
        telegram.user_message("I live in Busan")
        await until_sent(telegram, 1)

    run(home, fake_llm, telegram, body)
    files = list((home / "memories").glob("*/USER.md"))
    assert len(files) == 1 and files[0].read_text() == "Lives in Busan"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            {
                "text": "/new@hermes_test_bot now",
                "entities": [{"type": "bot_command", "offset": 0, "length": 20}],
            },
            "/new now",
        ),
        ({"caption": "look at this", "photo": [{}]}, "look at this"),
    ],
)
def test_to_event_is_pure(message: dict[str, Any], expected: str) -> None:
    update = {
        "update_id": 7,
        "message": {
            "message_id": 3,
            "date": 0,
            "chat": {"id": 5, "type": "private"},
            "from": {"id": 5, "is_bot": False, "first_name": "A"},
            **message,
        },
    }
    event = to_event(update, BOT["id"], BOT["username"])  # type: ignore[arg-type]
    assert event is not None and event.text == expected and event.message_id == "5:3"
    assert to_event({"update_id": 8, "edited_message": update["message"]}, 1, "b") is None


def test_forum_topic_replies_stay_in_their_topic_and_session(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    fake_llm.responder = slow_echo
    topic = {"chat_id": -100, "chat_type": "supergroup", "reply_to_bot": True}

    async def body() -> list[dict[str, Any]]:
        telegram.user_message("in topic seven", thread_id=7, **topic)
        telegram.user_message("in topic nine", thread_id=9, **topic)
        return await until_sent(telegram, 2)

    sent = run(home, fake_llm, telegram, body)
    by_topic = {p["message_thread_id"]: text_of(p) for p in sent}
    assert by_topic == {7: "echo: in topic seven", 9: "echo: in topic nine"}
    db = SessionDB.open(home)
    sessions = db.conversations.list_sessions(db.people.user_for_identity("telegram", "42"))
    assert sorted(s.thread_id or "" for s in sessions) == ["7", "9"]  # a session per topic
    db.close()


def test_a_dropped_connection_is_recorded_and_not_resent(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    telegram.faults.append(Fault("sendMessage", drop=True))
    fake_llm.push(Reply(text="the first answer"), Reply(text="the second answer"))

    async def body() -> None:
        telegram.user_message("hi")
        await until_sent(telegram, 1)
        # the chat's next message is answered only after the first reply's delivery is
        # settled: a second copy of it would be sent before this answer
        telegram.user_message("still there?")
        await until_sent(telegram, 2)

    run(home, fake_llm, telegram, body)
    # posted or not: never a second copy
    assert [m["text"] for m in telegram.sent()] == ["the first answer", "the second answer"]
    db = SessionDB.open(home)
    try:
        (failure,) = db.conversations.failed_deliveries("telegram")
        assert "outcome unknown" in (failure.error or "")
    finally:
        db.close()


def test_requests_cancelled_at_any_moment_leave_the_send_pool_whole(
    telegram: FakeTelegram,
) -> None:
    """A cancel in a request's first moments used to lose its pool connection: eight of
    them (the pool's size) and every later Bot API call waited for a connection forever."""
    chat = ChatRef("42", ChatType.DM)

    async def body() -> list[SendResult]:
        adapter = TelegramAdapter("123:TEST", base_url=telegram.base_url)
        await adapter.app.initialize()
        try:
            pace = random.Random(7)
            for number in range(200):
                call = adapter.typing(chat) if number % 2 else adapter.send(_out(chat, "x"))
                task = asyncio.ensure_future(call)
                await asyncio.sleep(pace.random() * 0.005)  # anywhere in the request
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            replies = [adapter.send(_out(chat, f"reply {n}")) for n in range(100)]
            return await asyncio.wait_for(asyncio.gather(*replies), 20)
        finally:
            await adapter.app.shutdown()

    results = asyncio.run(body())
    assert all(result.ok for result in results), [r.error for r in results if not r.ok]
    shown = {m["text"] for m in telegram.sent()}
    assert {f"reply {n}" for n in range(100)} <= shown


def test_sends_failing_in_transit_are_not_reported_connected(telegram: FakeTelegram) -> None:
    """Polling has a connection of its own: while every send fails, the platform is not
    "connected"; the next send that goes through makes it so again."""
    chat = ChatRef("42", ChatType.DM)
    telegram.faults.extend([Fault("sendMessage", drop=True), Fault("sendMessage", status=502)])

    async def body() -> list[str]:
        adapter = TelegramAdapter("123:TEST", base_url=telegram.base_url)
        await adapter.app.initialize()
        try:
            states = [await adapter.connection()]
            dropped = await adapter.send(_out(chat, "one"))
            assert dropped.outcome_unknown
            states.append(await adapter.connection())
            answered = await adapter.send(_out(chat, "two"))  # 502: answered, not posted
            assert answered.retryable and not answered.ok
            states.append(await adapter.connection())
            assert (await adapter.send(_out(chat, "three"))).ok
            states.append(await adapter.connection())
            return states
        finally:
            await adapter.app.shutdown()

    first, dropped, answered, sent = asyncio.run(body())
    assert first == "connected" and sent == "connected"
    assert dropped.startswith("reconnecting: sends are failing")
    assert answered.startswith("reconnecting: sends are failing")


async def _pool_timeout() -> None:
    """What python-telegram-bot raises when no connection of the pool came free."""
    try:
        raise httpx.PoolTimeout("no connection came free")
    except httpx.PoolTimeout as exc:
        raise TimedOut("Pool timeout: Request was *not* sent to Telegram.") from exc


def test_a_send_that_never_left_is_sent_again_and_an_unknown_one_is_not() -> None:
    waited = asyncio.run(_outcome(_pool_timeout()))
    assert isinstance(waited, SendResult)
    assert waited.retryable and not waited.outcome_unknown
    assert (waited.error or "").startswith("not sent")

    async def read_timeout() -> None:
        try:
            raise httpx.ReadTimeout("no answer")
        except httpx.ReadTimeout as exc:
            raise TimedOut() from exc

    unknown = asyncio.run(_outcome(read_timeout()))
    assert isinstance(unknown, SendResult)
    assert unknown.outcome_unknown and not unknown.retryable


def _out(chat: ChatRef, text: str) -> OutboundMessage:
    return OutboundMessage(chat, text)
