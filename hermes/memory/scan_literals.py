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
def required(pattern: str, *, folded: bool = False) -> Literals | None:
    """Strings one of which occurs in every match of `pattern` (None: no prefilter).

    A pattern with case-insensitive parts has none, unless `folded`: then its strings
    are case-folded (`fold`), and one of them occurs in every match's `fold`."""
    try:
        tree = parser.parse(pattern)
        if tree.state.flags & c.SRE_FLAG_IGNORECASE and not folded:
            return None
    except (re.error, RecursionError, ValueError):
        return None
    found = _sequence(list(tree), folded)
    if found is None or not all(_selective(s) for s in found):
        return None
    return frozenset(fold(s) for s in found) if folded else found


FOLDED = "\0"  # marks a folded string in what Prefilter.present returns


def needs(pattern: str | re.Pattern[str]) -> Literals | None:
    """What `pattern` needs among what `Prefilter.present` returns: its required strings,
    else its folded ones (marked with FOLDED), else None (it may match anything). A
    compiled pattern's own IGNORECASE flag counts."""
    source, flags = (pattern, 0) if isinstance(pattern, str) else (pattern.pattern, pattern.flags)
    found = None if flags & re.IGNORECASE else required(source)
    if found is not None:
        return found
    loose = required(source, folded=True)
    return None if loose is None else frozenset(FOLDED + s for s in loose)


def fold(text: str) -> str:
    """`text` with every character the regex engine's IGNORECASE takes as equal made
    the same, one character for one: U+0130 (whose full lowercase is two characters)
    read as the 'i' the engine lowers it to, lowercased, and each class of the
    engine's extra equivalences (re._casefix: ı and i, ſ and s, the Greek and Cyrillic
    variant forms) read as one of its members. Checked against every code point in
    tests/memory/test_scan_shapes.py."""
    return text.translate(_BEFORE_LOWER).lower().translate(_same_case())


_BEFORE_LOWER = {0x130: "i"}


@functools.cache
def _same_case() -> dict[int, int]:
    import re._casefix as casefix  # noqa: PLC0415 - the engine's own table, read once

    table: dict[int, int] = {}
    for code, others in casefix._EXTRA_CASES.items():
        members = {code, *others}
        first = min(members)
        table.update({member: first for member in members if member != first})
    return table


def _selective(text: str) -> bool:
    return len(text) >= _MIN_SELECTIVE or not text.isascii()


def _sequence(items: list[tuple[Any, Any]], folded: bool) -> Literals | None:
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
        inner = _node(op, value, folded)
        if inner is not None:
            candidates.append(inner)
    if run:
        candidates.append(frozenset({run}))
    return max(candidates, key=_selectivity, default=None)


def _node(op: Any, value: Any, folded: bool) -> Literals | None:
    if op is c.ATOMIC_GROUP:  # (?>...): a group like any other here
        op, value = c.SUBPATTERN, (None, 0, 0, value)
    if op is c.SUBPATTERN:
        _, added, _, content = value
        if added & c.SRE_FLAG_IGNORECASE and not folded:  # letters may come in either case
            return None
        return _sequence(list(content), folded)
    if op is c.BRANCH:
        branches = [_sequence(list(branch), folded) for branch in value[1]]
        if any(b is None for b in branches):
            return None
        return frozenset().union(*(b for b in branches if b is not None))
    if op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
        least, _, content = value
        return _sequence(list(content), folded) if least >= 1 else None
    return None  # a character class, any character, a back reference: nothing literal


def _selectivity(found: Literals) -> tuple[int, int]:
    return min((len(s) for s in found), default=0), -len(found)


class Prefilter:
    """Which of the required strings of `patterns` occur in a text, found in one pass."""

    def __init__(self, patterns: Iterable[str | re.Pattern[str]]) -> None:
        import ahocorasick  # noqa: PLC0415 - on the first scan only

        self._exact = ahocorasick.Automaton()
        self._folded = ahocorasick.Automaton()
        for pattern in patterns:
            for text in needs(pattern) or ():
                if text.startswith(FOLDED):
                    self._folded.add_word(text.removeprefix(FOLDED), text)
                else:
                    self._exact.add_word(text, text)
        for automaton in (self._exact, self._folded):
            if len(automaton):
                automaton.make_automaton()

    def present(self, text: str) -> frozenset[str]:
        """The strings `needs` names that occur in `text` (folded ones in its `fold`)."""
        found = {found for _, found in self._exact.iter(text)} if len(self._exact) else set()
        if len(self._folded):
            found.update(found for _, found in self._folded.iter(fold(text)))
        return frozenset(found)


def may_match(pattern: str, present: frozenset[str]) -> bool:
    """False only when `pattern` cannot match the text whose strings found are
    `present` (Prefilter.present); True when it may."""
    found = needs(pattern)
    return found is None or not found.isdisjoint(present)


__all__ = ["FOLDED", "Prefilter", "fold", "may_match", "needs", "required"]
