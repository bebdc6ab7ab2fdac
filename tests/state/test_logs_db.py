"""The gateways' kept log lines (`log_records`) on both backends: filters, the problems'
summary, and pruning by level."""

from __future__ import annotations

import logging
from datetime import timedelta

from hermes.state.db import SessionDB
from hermes.state.logs import LogFilter
from hermes.state.models import LogRecord, utcnow


def record(
    message: str, level: int = logging.WARNING, ago: timedelta = timedelta(), **kw: str
) -> LogRecord:
    return LogRecord(
        at=utcnow() - ago, level=level, message=message, logger=kw.pop("logger", "gateway.x"), **kw
    )


def test_kept_lines_are_found_by_level_span_turn_instance_and_text(db: SessionDB) -> None:
    db.logs.add(
        [
            record("Model call failed: HTTP 502", logging.ERROR, turn="t-1", instance="a:1"),
            record("platform slack: reconnecting", instance="b:2"),
            record("an old failure", logging.ERROR, ago=timedelta(days=2)),
            record("100% of the disk; _under_ scores", instance="b:2"),
        ]
    )

    def found(**wanted: object) -> list[str]:
        return [r.message for r in db.logs.find(LogFilter(**wanted), 50)]  # type: ignore[arg-type]

    assert found(level=logging.ERROR) == ["Model call failed: HTTP 502", "an old failure"]
    assert found(level=logging.ERROR, since=utcnow() - timedelta(hours=1)) == [
        "Model call failed: HTTP 502"
    ]
    assert found(turn="t-1") == ["Model call failed: HTTP 502"]
    assert found(instance="b:2") == [
        "100% of the disk; _under_ scores",
        "platform slack: reconnecting",
    ]
    assert found(text="MODEL CALL") == ["Model call failed: HTTP 502"]  # any case
    assert found(text="100%") == ["100% of the disk; _under_ scores"]  # no wildcards
    assert found(text="_under_") == ["100% of the disk; _under_ scores"]
    assert found(text="0%") == ["100% of the disk; _under_ scores"]
    newest = db.logs.find(LogFilter(), 1)[0]
    assert [r.message for r in db.logs.find(LogFilter(before=(newest.at, newest.id or 0)), 50)] == [
        "platform slack: reconnecting",
        "Model call failed: HTTP 502",
        "an old failure",
    ]


def test_the_problems_summary_counts_each_source_with_its_newest_line(db: SessionDB) -> None:
    db.logs.add(
        [
            record("first", logging.ERROR, logger="hermes.agent.agent"),
            record("second", logging.ERROR, logger="hermes.agent.agent"),
            record("slow", logger="gateway.loopwatch"),
            record("too old", logging.ERROR, logger="gateway.old", ago=timedelta(hours=2)),
        ]
    )
    sources = db.logs.sources(utcnow() - timedelta(hours=1))
    assert [(s.logger, s.level, s.count, s.last_message) for s in sources] == [
        ("hermes.agent.agent", logging.ERROR, 2, "second"),
        ("gateway.loopwatch", logging.WARNING, 1, "slow"),
    ]
    assert db.logs.sources(utcnow() - timedelta(hours=1), logging.ERROR)[0].count == 2


def test_each_level_is_kept_its_own_days_and_unkept_levels_go(db: SessionDB) -> None:
    db.logs.add(
        [
            record("info, 2 days", logging.INFO, ago=timedelta(days=2)),
            record("warning, 10 days", ago=timedelta(days=10)),
            record("warning, 20 days", ago=timedelta(days=20)),
            record("error, 20 days", logging.ERROR, ago=timedelta(days=20)),
            record("critical, 100 days", logging.CRITICAL, ago=timedelta(days=100)),
        ]
    )
    gone = db.logs.prune({logging.WARNING: 14, logging.ERROR: 90})
    left = [r.message for r in db.logs.find(LogFilter(level=0), 50)]
    assert gone == 3 and left == ["warning, 10 days", "error, 20 days"]
    assert db.logs.prune({}) == 2 and db.logs.find(LogFilter(level=0), 50) == []
