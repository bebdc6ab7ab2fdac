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


def test_the_quick_split_agrees_with_the_line_by_line_one() -> None:
    """Files Hermes writes split on the plain separator; any other '§' (hand-edited
    separators with spaces, one at the start or end, a '§' inside an entry) takes the
    line-by-line way: both must give the same entries, on texts made of every piece."""
    import random

    rng = random.Random(9)
    pieces = ["a", "b c", "\n", "§", " § ", "\n§\n", "\r\n", "§x", "\t§", " "]

    def by_lines(text: str) -> list[str]:
        parts: list[list[str]] = [[]]
        for line in text.replace("\r\n", "\n").split("\n"):
            if line.strip() == "§":
                parts.append([])
            else:
                parts[-1].append(line)
        return fmt.dedupe("\n".join(lines).strip() for lines in parts)

    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert fmt.parse(text) == by_lines(text), repr(text)
