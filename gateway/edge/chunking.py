"""Splitting a long reply to fit a platform's message limit.

Split at paragraph, then line, then word boundaries (a word longer than the limit is
cut); never leave a code fence open in a chunk: a fence split across chunks is closed at
the end of one and reopened, with its language, at the start of the next. `length`
measures text the way the platform does (Telegram counts UTF-16 code units).
"""

from __future__ import annotations

import re
from collections.abc import Callable

FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")
Length = Callable[[str], int]


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def chunk(text: str, limit: int, length: Length = len) -> list[str]:
    text = text.strip()
    if not text:
        return []
    if length(text) <= limit:
        return [text]
    reserve = _fence_reserve(text, length)
    pieces = _pack(text, limit - reserve, length, ["\n\n", "\n", " "])
    return [c for c in _balance_fences(pieces) if c.strip()]


def _fence_reserve(text: str, length: Length) -> int:
    openers = [m.group(0).strip() for line in text.split("\n") if (m := FENCE.match(line))]
    return max((length(o) + length("\n```\n") + 1 for o in openers), default=0)


def _pack(text: str, limit: int, length: Length, separators: list[str]) -> list[str]:
    """Greedy packing of `text` split on the first separator, recursing for big parts."""
    if length(text) <= limit:
        return [text]
    if not separators:
        return _hard_cut(text, limit, length)
    sep, rest = separators[0], separators[1:]
    chunks: list[str] = []
    current = ""
    for part in text.split(sep):
        candidate = f"{current}{sep}{part}" if current else part
        if length(candidate) <= limit:
            current = candidate
            continue
        if current:
            chunks.append(current)
        if length(part) <= limit:
            current = part
        else:
            *done, current = _pack(part, limit, length, rest)
            chunks.extend(done)
    if current:
        chunks.append(current)
    return chunks


def _hard_cut(text: str, limit: int, length: Length) -> list[str]:
    out, current = [], ""
    for char in text:
        if length(current + char) > limit:
            out.append(current)
            current = ""
        current += char
    return [*out, current] if current else out


def _closing(opener: str) -> str:
    match = FENCE.match(opener)
    return match.group(1) if match else "```"


def _balance_fences(chunks: list[str]) -> list[str]:
    balanced = []
    opener: str | None = None  # the fence line open at the end of the previous chunk
    for piece in chunks:
        body = f"{opener}\n{piece}" if opener else piece
        for line in piece.split("\n"):
            match = FENCE.match(line)
            if match:
                opener = None if opener else line.strip()
        balanced.append(f"{body}\n{_closing(opener)}" if opener else body)
    return balanced
