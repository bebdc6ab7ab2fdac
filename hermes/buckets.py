"""Rate limits per key (a person): a token bucket each, `burst` tokens refilled at
`per_minute`, one token a use; the least recently used keys are forgotten past
`remembered`. Used by intake (messages) and the web tools (searches and fetches)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class Taken(Enum):
    YES = "yes"
    NO = "no"  # refused, and the person was told within the last minute
    NO_SAY_SO = "no, say so"  # refused: the first refusal in a minute, worth a word


@dataclass
class _Bucket:
    tokens: float
    at: float
    told_at: float = float("-inf")


class Buckets:
    def __init__(
        self,
        per_minute: float,
        burst: int,
        *,
        remembered: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute, self.burst, self.remembered = per_minute, burst, remembered
        self.clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, key: str) -> Taken:
        now = self.clock()
        bucket = self._buckets.pop(key, None) or _Bucket(self.burst, now)
        self._buckets[key] = bucket  # the most recent last: the oldest are forgotten
        while len(self._buckets) > self.remembered:
            self._buckets.popitem(last=False)
        refill = (now - bucket.at) * self.per_minute / 60
        bucket.tokens = min(self.burst, bucket.tokens + refill)
        bucket.at = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return Taken.YES
        if now - bucket.told_at >= 60:
            bucket.told_at = now
            return Taken.NO_SAY_SO
        return Taken.NO
