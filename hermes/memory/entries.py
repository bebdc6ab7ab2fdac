"""The store file format: entries joined by a line holding only `§`.

Pure functions, no I/O. Usage is counted in code points of the joined text, separators
included, and the limit applies to the whole store.
"""

from __future__ import annotations

from collections.abc import Iterable

SEPARATOR = "\n§\n"


def parse(text: str) -> list[str]:
    """Entries of a store file: each stripped, empty ones and exact duplicates dropped."""
    text = text.replace("\r\n", "\n")
    return dedupe(part.strip() for part in _split(text))


def serialize(entries: Iterable[str]) -> str:
    return SEPARATOR.join(entries)


def usage(entries: Iterable[str]) -> int:
    return len(serialize(entries))


def dedupe(entries: Iterable[str]) -> list[str]:
    """Drop empty entries and exact duplicates, keeping the first occurrence."""
    seen: set[str] = set()
    kept: list[str] = []
    for entry in entries:
        if entry and entry not in seen:
            seen.add(entry)
            kept.append(entry)
    return kept


def has_separator_line(content: str) -> bool:
    """True when `content` holds a line that is only `§`, which would split the entry."""
    return any(line.strip() == "§" for line in content.replace("\r\n", "\n").split("\n"))


def _split(text: str) -> list[str]:
    # A separator line may carry stray spaces when edited by hand ("§ "), and the
    # file may start or end with one; split on any line whose stripped text is "§".
    parts_fast = text.split(SEPARATOR)
    if text.count("§") == len(parts_fast) - 1:  # every § is in a plain separator
        return parts_fast
    parts: list[list[str]] = [[]]
    for line in text.split("\n"):
        if line.strip() == "§":
            parts.append([])
        else:
            parts[-1].append(line)
    return ["\n".join(lines) for lines in parts]
