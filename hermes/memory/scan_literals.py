"""The literal text a pattern cannot match without: a fast prefilter for the scan.

Python's regex engine tries every branch of a large alternation at every position, so
a multilingual word list costs ~0.5 µs a character even where none of its words occur.
`required(pattern)` reads the pattern's syntax tree once and returns a set of strings
such that every match contains at least one of them (or None when no such set can be
said). `Prefilter` finds which of all those strings occur in a text in one pass (an
Aho-Corasick automaton, pyahocorasick), and a pattern runs only when one of its own
does.

For a sequence, a run of literal characters is required as a whole (zero-width parts
such as \\b or a lookbehind do not break it); a group or a repeat that must match at
least once requires what its content requires; an alternation requires one of what its
branches require (and nothing, if one branch requires nothing). Of a sequence's
candidates, the most selective (longest shortest string, then fewest strings) is kept.
"""

from __future__ import annotations

import functools
import re
import re._constants as c  # the syntax tree's node kinds (Python 3.11+)
import re._parser as parser
from collections.abc import Iterable
from typing import Any

Literals = frozenset[str]

_ZERO_WIDTH = {c.AT, c.ASSERT, c.ASSERT_NOT}
_MIN_SELECTIVE = 2  # a one-letter ASCII literal filters nothing


@functools.cache
def required(pattern: str) -> Literals | None:
    """Strings one of which occurs in every match of `pattern` (None: no prefilter)."""
    try:
        tree = parser.parse(pattern)
        if tree.state.flags & c.SRE_FLAG_IGNORECASE:
            return None
    except (re.error, RecursionError, ValueError):
        return None
    found = _sequence(list(tree))
    if found is None or not all(_selective(s) for s in found):
        return None
    return found


def _selective(text: str) -> bool:
    return len(text) >= _MIN_SELECTIVE or not text.isascii()


def _sequence(items: list[tuple[Any, Any]]) -> Literals | None:
    candidates: list[Literals] = []
    run = ""
    for op, value in items:
        if op is c.LITERAL:
            run += chr(value)
            continue
        if op in _ZERO_WIDTH:
            continue
        if run:
            candidates.append(frozenset({run}))
            run = ""
        inner = _node(op, value)
        if inner is not None:
            candidates.append(inner)
    if run:
        candidates.append(frozenset({run}))
    return max(candidates, key=_selectivity, default=None)


def _node(op: Any, value: Any) -> Literals | None:
    if op is c.ATOMIC_GROUP:  # (?>...): a group like any other here
        op, value = c.SUBPATTERN, (None, 0, 0, value)
    if op is c.SUBPATTERN:
        _, added, _, content = value
        if added & c.SRE_FLAG_IGNORECASE:  # its letters may come in either case
            return None
        return _sequence(list(content))
    if op is c.BRANCH:
        branches = [_sequence(list(branch)) for branch in value[1]]
        if any(b is None for b in branches):
            return None
        return frozenset().union(*(b for b in branches if b is not None))
    if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
        least, _, content = value
        return _sequence(list(content)) if least >= 1 else None
    return None  # a character class, any character, a back reference: nothing literal


def _selectivity(found: Literals) -> tuple[int, int]:
    return min((len(s) for s in found), default=0), -len(found)


class Prefilter:
    """Which of the required strings of `patterns` occur in a text, found in one pass."""

    def __init__(self, patterns: Iterable[str]) -> None:
        import ahocorasick  # noqa: PLC0415 - on the first scan only

        self._automaton = ahocorasick.Automaton()
        for pattern in patterns:
            for text in required(pattern) or ():
                self._automaton.add_word(text, text)
        self._automaton.make_automaton()

    def present(self, text: str) -> frozenset[str]:
        """The required strings that occur in `text`."""
        return frozenset(found for _, found in self._automaton.iter(text))


def may_match(pattern: str, present: frozenset[str]) -> bool:
    """False only when `pattern` cannot match the text whose required strings that
    occur are `present` (Prefilter.present); True when it may."""
    found = required(pattern)
    return found is None or not found.isdisjoint(present)


__all__ = ["Prefilter", "may_match", "required"]
