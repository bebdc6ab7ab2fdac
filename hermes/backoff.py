"""Doubling, jittered waits: the one backoff of every retry loop (a locked database, a
platform that will not start, a message the platform refused for now)."""

from __future__ import annotations

import random


class Backoff:
    """`first`, then twice as long each time up to `cap`; each wait is spread by
    ±`jitter` (a fraction) so that many retrying at once do not march in step."""

    def __init__(self, first: float, cap: float, jitter: float = 0.2) -> None:
        if not 0 < first <= cap or not 0 <= jitter < 1:
            raise ValueError(
                f"backoff needs 0 < first <= cap and 0 <= jitter < 1, got {first}, {cap}, {jitter}"
            )
        self.first, self.cap, self.jitter = first, cap, jitter
        self._base = first

    def next(self) -> float:
        """The next wait, in seconds."""
        wait = self._base * random.uniform(1 - self.jitter, 1 + self.jitter)
        self._base = min(self._base * 2, self.cap)
        return wait

    def peek(self) -> float:
        """The next wait without its jitter (what a deadline is checked against)."""
        return self._base


__all__ = ["Backoff"]
