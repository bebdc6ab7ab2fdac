"""A message answered long after it was written says so (gateway/pipeline/turns.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.edge.events import ChatRef, ChatType, MessageEvent, UserRef
from gateway.pipeline.turns import LATE_AFTER_S, ago, late_by


def written(sent_at: float | None, received: float) -> MessageEvent:
    return MessageEvent(
        "matrix", "$e", "$e", ChatRef("!r:x", ChatType.DM), UserRef("@a:x"), "hi",
        sent_at=sent_at, received_at=datetime.fromtimestamp(received, UTC),
    )  # fmt: skip


def test_a_message_the_gateway_received_long_after_it_was_written_is_late() -> None:
    now = 1_800_000_000.0
    assert late_by(written(now - 30, now)) is None  # a quick restart is not late
    assert late_by(written(now - LATE_AFTER_S - 1, now)) == LATE_AFTER_S + 1
    assert late_by(written(None, now)) is None and late_by(written(0.0, now)) is None  # unknown
    # received at once, answered later (it waited behind a long turn): not late
    assert late_by(written(now - 3600, now - 3599)) is None


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(601, "10 minutes"), (3_600, "1 hour"), (7_300, "2 hours"), (86_400 * 3 + 5, "3 days")],
)
def test_how_long_ago_is_said_in_its_largest_unit(seconds: float, said: str) -> None:
    assert ago(seconds) == said
