"""Waiting for something that must happen, the one way tests do it: poll a check until
it holds, or fail at a deadline saying what never happened (and what was seen)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
POLL_S = 0.05


def _said(what: str | Callable[[], str]) -> str:
    return what() if callable(what) else what


async def until(check: Callable[[], T], what: str | Callable[[], str], timeout: float = 20) -> T:
    """`check()` once it is truthy (its value); else fail saying `what` did not happen."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, _said(what)
        await asyncio.sleep(POLL_S)
    return value


async def until_count(
    items: Callable[[], Sequence[T]], count: int, what: str = "items", timeout: float = 20
) -> list[T]:
    """`items()` once it holds `count` or more (the last few shown when it never does)."""

    def enough() -> bool:
        return len(items()) >= count

    await until(
        enough, lambda: f"only {len(items())} of {count} {what}: {list(items())[-3:]}", timeout
    )
    return list(items())


def wait_until(check: Callable[[], T], what: str | Callable[[], str], timeout: float = 20) -> T:
    """`until`, for a test that is not a coroutine."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, _said(what)
        time.sleep(POLL_S)
    return value


__all__ = ["until", "until_count", "wait_until"]
