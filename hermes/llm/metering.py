"""Whose tokens a side call spends: the person a model call is made for.

A turn's own replies are counted with the messages they are stored with
(`ConversationsDB.add_messages`); every other call made for a person (compressing their
session, reviewing it for memory, the memory guard's judgement of their write,
consolidating their store, summarizing their search) is counted by the client's meter,
charged to the person the code around it names with `charged_to`. A call outside any
`charged_to` (a health probe, the doctor) or inside `uncharged` (the turn's own, counted
with its messages) is not metered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# (person, prompt tokens, completion tokens, the model asked): stores them
Meter = Callable[[str, int, int, str], Awaitable[None]]

_payer: ContextVar[str | None] = ContextVar("hermes_llm_payer", default=None)


@contextmanager
def charged_to(user_id: str | None) -> Iterator[None]:
    """The model calls made inside (and in tasks started inside) are `user_id`'s;
    None: nobody's (not metered)."""
    token = _payer.set(user_id)
    try:
        yield
    finally:
        _payer.reset(token)


@contextmanager
def uncharged() -> Iterator[None]:
    """Calls counted elsewhere (a turn's replies, stored with their usage)."""
    with charged_to(None):
        yield


def payer() -> str | None:
    """The person the current call is made for, if any."""
    return _payer.get()
