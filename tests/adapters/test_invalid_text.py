"""Text that is not valid Unicode (a lone surrogate: half of an emoji's UTF-16 pair, as a
platform's or a model's JSON can escape it) is made valid where it enters, so nothing
downstream (state.db on either backend, the model's endpoint, the platform) fails on
it: a half alone becomes U+FFFD, two halves that belong together their character."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.telegram.adapter import TelegramAdapter
from gateway.edge.ports import MenuEntry
from hermes.state.db import SessionDB
from hermes.text import valid_text
from tests.adapters.harness import run_gateway
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.wait import until_count


def test_valid_text_joins_pairs_and_replaces_halves() -> None:
    assert valid_text("half \ud83d here") == "half \ufffd here"
    assert valid_text("lone low \ude00 and bytes \udcff") == "lone low \ufffd and bytes \ufffd"
    assert valid_text("a pair \ud83d\ude00 split") == "a pair \U0001f600 split"
    text = "é ✓ 日本 😀"
    assert valid_text(text) is text  # valid text is left as it is


def test_a_message_and_a_name_with_half_an_emoji_are_answered_and_stored(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, database_url: str | None
) -> None:
    fake_llm.default = Reply(text="Noted \ud83d, thanks \ud83d\ude00")  # the model's too

    def adapter(menu: list[MenuEntry]) -> TelegramAdapter:
        return TelegramAdapter("123:TEST", base_url=telegram.base_url, poll_timeout=1, menu=menu)

    async def body() -> list[dict[str, Any]]:
        sender = {"id": 77, "is_bot": False, "first_name": "Ana \ud83d"}
        telegram.user_message(
            "my cat \ud83d is called Miso \ud83d\ude3a", user_id=77, extra={"from": sender}
        )
        return await until_count(telegram.sent, 1, "sent", 20)

    sent = run_gateway(home, fake_llm, adapter, body, database_url=database_url)
    assert sent[0]["text"] == "Noted \ufffd, thanks \U0001f600"
    asked = fake_llm.requests[0]["messages"][-1]["content"]
    assert "my cat \ufffd is called Miso \U0001f63a" in asked
    db = SessionDB.open(home, database_url)
    try:
        [person] = [s.user for s in db.people.users() if "Ana" in s.user.display_name]
        assert person.display_name == "Ana \ufffd"
        [session] = db.conversations.list_sessions(person.id)
        stored = [m.content for m in db.conversations.messages(session.id, person.id)]
        assert stored == [
            "my cat \ufffd is called Miso \U0001f63a",
            "Noted \ufffd, thanks \U0001f600",
        ]
    finally:
        db.close()
