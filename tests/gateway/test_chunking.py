from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gateway.edge.chunking import chunk, utf16_length


def test_short_text_is_one_chunk() -> None:
    assert chunk("  hello  ", 10) == ["hello"]
    assert chunk("   ", 10) == []


def test_prefers_paragraph_then_line_then_word_boundaries() -> None:
    text = "para one line\n\npara two is here"
    assert chunk(text, 20) == ["para one line", "para two is here"]
    assert chunk("aaa bbb\nccc ddd", 8) == ["aaa bbb", "ccc ddd"]
    assert chunk("one two three four", 9) == ["one two", "three", "four"]
    assert chunk("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_ten_thousand_chars_for_telegram_discord_and_slack() -> None:
    text = "\n\n".join(f"Paragraph {i}: " + "word " * 60 for i in range(35))
    assert len(text) > 10_000
    for limit in (4096, 2000, 40000):
        parts = chunk(text, limit)
        assert all(len(p) <= limit for p in parts)
        assert " ".join(" ".join(parts).split()) == " ".join(text.split())


def test_code_fences_are_closed_and_reopened() -> None:
    code = "\n".join(f"print({i})" for i in range(200))
    text = f"Here:\n\n```python\n{code}\n```\n\nDone."
    parts = chunk(text, 500)
    assert len(parts) > 2
    for part in parts:
        assert len(part) <= 500
        assert part.count("```") % 2 == 0, part
    assert parts[1].startswith("```python\n")
    body = "".join(parts)
    assert all(f"print({i})" in body for i in range(200))


def test_telegram_counts_utf16_code_units() -> None:
    text = "🙂" * 3000  # 3,000 code points, 6,000 UTF-16 units
    parts = chunk(text, 4096, utf16_length)
    assert all(utf16_length(p) <= 4096 for p in parts) and len(parts) == 2


lines = st.lists(
    st.one_of(st.just("```"), st.text(alphabet=st.sampled_from(list("ab c🙂")), max_size=40)),
    max_size=40,
)


@given(lines, st.integers(30, 120))
def test_property_chunks_fit_keep_order_and_balance_fences(parts_in: list[str], limit: int) -> None:
    text = "\n".join(parts_in)
    parts = chunk(text, limit)
    assert all(len(p) <= limit for p in parts)
    assert all(p.count("```") % 2 == 0 for p in parts) or text.count("```") % 2 == 1

    def visible(s: str) -> str:  # what a reader sees, minus whitespace and fence markers
        return re.sub(r"[\s`]", "", s)

    assert visible("".join(parts)) == visible(text)
