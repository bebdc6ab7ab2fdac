"""The one backoff: doubling waits up to a cap, spread by jitter."""

from __future__ import annotations

import random

import pytest

from hermes.backoff import Backoff


def test_waits_double_up_to_the_cap_within_their_jitter() -> None:
    random.seed(5)
    waits = Backoff(first=1.0, cap=10.0, jitter=0.2)
    bases = [1, 2, 4, 8, 10, 10]
    for base in bases:
        assert base * 0.8 <= waits.next() <= base * 1.2


def test_no_jitter_is_exact_and_peek_does_not_advance() -> None:
    waits = Backoff(first=0.5, cap=1.0, jitter=0)
    assert waits.peek() == 0.5 and waits.peek() == 0.5
    assert [waits.next() for _ in range(3)] == [0.5, 1.0, 1.0]


@pytest.mark.parametrize(("first", "cap", "jitter"), [(0, 1, 0.1), (2, 1, 0.1), (1, 2, 1.0)])
def test_nonsense_is_refused(first: float, cap: float, jitter: float) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        Backoff(first, cap, jitter)
