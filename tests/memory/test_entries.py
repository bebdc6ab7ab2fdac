from __future__ import annotations

import pytest

from hermes.memory import entries as fmt


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("   \n\n  ", []),
        ("one", ["one"]),
        ("one\n§\ntwo", ["one", "two"]),
        ("  one  \n§\n\n two\nlines \n", ["one", "two\nlines"]),
        ("a\n§\n\n§\nb", ["a", "b"]),  # empty entries dropped
        ("a\n§\nb\n§\na", ["a", "b"]),  # exact duplicates dropped, first kept
        ("price § 5\n§\nx", ["price § 5", "x"]),  # § inside a line is text
        ("§\na\n§", ["a"]),  # leading/trailing separator lines
        ("a\r\n§\r\nb", ["a", "b"]),  # CRLF from an editor on another OS
        ("a\n § \nb", ["a", "b"]),  # a separator line with stray blanks
    ],
)
def test_parse(text: str, expected: list[str]) -> None:
    assert fmt.parse(text) == expected


def test_serialize_round_trips_and_counts_separators() -> None:
    entries = ["first entry", "second\nmulti-line entry", "한국어 항목"]
    text = fmt.serialize(entries)
    assert text == "first entry\n§\nsecond\nmulti-line entry\n§\n한국어 항목"
    assert fmt.parse(text) == entries
    assert fmt.usage(entries) == len(text) == sum(map(len, entries)) + 2 * 3


def test_usage_counts_code_points_not_bytes() -> None:
    assert fmt.usage(["日本語"]) == 3
    assert fmt.usage(["🙂"]) == 1


def test_separator_line_detection() -> None:
    assert fmt.has_separator_line("a\n§\nb")
    assert fmt.has_separator_line("a\n  §  \nb")
    assert not fmt.has_separator_line("cost § 5")
