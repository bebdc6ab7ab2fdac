"""Delivery parts are measured on the text as it is sent, not on the Markdown."""

from __future__ import annotations

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.render import to_telegram_html
from gateway.edge.chunking import utf16_length
from gateway.pipeline.delivery import parts

TELEGRAM = TelegramAdapter.capabilities


def test_markdown_that_grows_when_rendered_is_split_to_the_real_limit() -> None:
    # under 4,096 as Markdown, far over it as Telegram HTML (every `&` becomes `&amp;`)
    text = "\n".join("**R&D** & <ops> " * 12 for _ in range(18))
    assert utf16_length(text) <= 4096 < utf16_length(to_telegram_html(text))
    pieces = [markdown for markdown, _ in parts(text, TELEGRAM)]
    assert len(pieces) >= 2
    assert all(utf16_length(to_telegram_html(p)) <= 4096 for p in pieces)
    assert all(sent == to_telegram_html(md) for md, sent in parts(text, TELEGRAM))
    assert " ".join(" ".join(pieces).split()) == " ".join(text.split())


def test_text_that_fits_as_sent_is_one_part() -> None:
    text = "plain words " * 300
    assert parts(text, TELEGRAM) == [(text.strip(), to_telegram_html(text.strip()))]


def test_emoji_count_as_two_utf16_units_on_telegram() -> None:
    text = "😀" * 3000  # 3,000 characters, 6,000 UTF-16 units
    pieces = parts(text, TELEGRAM)
    assert len(pieces) == 2 and all(utf16_length(sent) <= 4096 for _, sent in pieces)
