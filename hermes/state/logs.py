"""The gateway's warnings and errors kept in state.db (`log_records`): what went wrong
in the last hour on every instance, still there after a restart. Written in batches by
the log's own thread (gateway/logs.py `StoredLog`), read by the dashboard, pruned by the
daily maintenance per level (`logging.keep_days`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, delete, func, or_, true
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import LogRecord, utcnow

MESSAGE_CHARS = 8000  # a traceback is kept whole up to this; the rest is in the journal


@dataclass(frozen=True, slots=True)
class LogFilter:
    """Which records: at `level` or above, newer than `since`, of one turn or instance,
    whose message holds `text` (any case); older than the record `before` (paging)."""

    level: int = 30
    since: datetime | None = None
    turn: str = ""
    instance: str = ""
    text: str = ""
    before: tuple[datetime, int] | None = None  # (at, id) of the oldest record shown


@dataclass(frozen=True, slots=True)
class Source:
    """Where recent problems come from: one logger's records at a level, the newest."""

    logger: str
    level: int
    count: int
    last_at: datetime
    last_message: str


class LogsDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    def add(self, rows: Sequence[LogRecord]) -> None:
        """New rows only: no lock beyond the rows' own."""
        for row in rows:
            row.message = row.message[:MESSAGE_CHARS]

        def work(session: Session) -> None:
            session.add_all(rows)

        eng.with_retry(self.engine, work, self.patience, keys=())

    def find(self, wanted: LogFilter, limit: int) -> list[LogRecord]:
        """The newest `limit` records that match, newest first (by when they were
        logged: instances write theirs a second apart)."""
        query = select(LogRecord).where(col(LogRecord.level) >= wanted.level)
        if wanted.since is not None:
            query = query.where(col(LogRecord.at) >= wanted.since)
        if wanted.turn:
            query = query.where(col(LogRecord.turn) == wanted.turn)
        if wanted.instance:
            query = query.where(col(LogRecord.instance) == wanted.instance)
        if wanted.text:
            query = query.where(col(LogRecord.message).icontains(wanted.text, autoescape=True))
        if wanted.before is not None:
            at, row_id = wanted.before
            older = col(LogRecord.at) < at
            query = query.where(
                or_(older, and_(col(LogRecord.at) == at, col(LogRecord.id) < row_id))
            )
        order = (col(LogRecord.at).desc(), col(LogRecord.id).desc())
        query = query.order_by(*order).limit(limit)
        with eng.reading(self.engine) as session:
            return list(session.exec(query).all())

    def sources(self, since: datetime, level: int = 30) -> list[Source]:
        """The loggers that logged at `level` or above since `since`, each with its count
        and its newest line, the most frequent first."""
        counted = (
            select(
                LogRecord.logger,
                LogRecord.level,
                func.count().label("n"),
                func.max(LogRecord.id).label("last"),
            )
            .where(col(LogRecord.at) >= since, col(LogRecord.level) >= level)
            .group_by(col(LogRecord.logger), col(LogRecord.level))
        )
        with eng.reading(self.engine) as session:
            groups = session.exec(counted).all()
            newest = {
                row.id: row
                for row in session.exec(
                    select(LogRecord).where(col(LogRecord.id).in_([g[3] for g in groups]))
                )
            }
        found = [
            Source(logger, level, int(n), newest[last].at, newest[last].message)
            for logger, level, n, last in groups
            if last in newest
        ]
        return sorted(found, key=lambda s: (-s.level, -s.count, s.logger))

    def prune(self, keep_days: Mapping[int, int], now: datetime | None = None) -> int:
        """Forget each level's records older than its days (`keep_days`: level -> days;
        a level between two named ones keeps the days of the one below it), and those
        below every level named (no longer kept)."""
        now = now or utcnow()
        levels = sorted(keep_days)

        def work(session: Session) -> int:
            below = col(LogRecord.level) < levels[0] if levels else true()
            result = session.execute(delete(LogRecord).where(below))
            gone = int(getattr(result, "rowcount", 0) or 0)
            for i, level in enumerate(levels):
                upper = levels[i + 1] if i + 1 < len(levels) else None
                cutoff = now - timedelta(days=keep_days[level])
                condition = [col(LogRecord.level) >= level, col(LogRecord.at) < cutoff]
                if upper is not None:
                    condition.append(col(LogRecord.level) < upper)
                result = session.execute(delete(LogRecord).where(*condition))
                gone += int(getattr(result, "rowcount", 0) or 0)
            return gone

        return eng.with_retry(self.engine, work, self.patience, keys=())


__all__ = ["LogFilter", "LogsDB", "Source"]
