"""Each platform's state over time, per gateway instance (`platform_spans`): written by
the gateway when a platform's state changes and renewed every minute while it lasts
(gateway/uptime.py), read by the dashboard's platform health (uptime, outages), pruned
by the daily maintenance after KEPT_DAYS."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import PlatformSpan, as_utc, utcnow

KEPT_DAYS = 90
RENEW_S = 60.0  # a gateway renews its open spans this often
OPEN_WITHIN = timedelta(seconds=2.5 * RENEW_S)  # a span renewed this lately still lasts
DETAIL_CHARS = 300


@dataclass(frozen=True, slots=True)
class OpenSpan:
    """A span this instance is still in: its row, and the state it says."""

    id: int
    state: str


class PlatformHealthDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    def record(
        self,
        instance: str,
        states: Mapping[str, tuple[str, str]],
        opened: Mapping[str, OpenSpan],
        now: datetime | None = None,
    ) -> dict[str, OpenSpan]:
        """Bring this instance's spans to `now`: each open span is renewed to `now`, and
        ended there when its platform's state changed or the platform is no longer in
        `states` (platform -> (state, detail); {} at a stop ends them all); a span
        begins for each platform whose state is not its open span's. The spans open
        after it."""
        now = now or utcnow()

        def work(session: Session) -> dict[str, OpenSpan]:
            going_on = [
                span.id
                for platform, span in opened.items()
                if states.get(platform, ("", ""))[0] == span.state
            ]
            ending = [span.id for span in opened.values() if span.id not in going_on]
            for ids, ended in ((going_on, False), (ending, True)):
                if ids:
                    session.execute(
                        update(PlatformSpan)
                        .where(col(PlatformSpan.id).in_(ids))
                        .values(until=now, ended=ended)
                    )
            still = {}
            for platform, (state, detail) in states.items():
                span = opened.get(platform)
                if span is not None and span.id in going_on:
                    still[platform] = span
                    continue
                row = PlatformSpan(
                    instance=instance,
                    platform=platform,
                    state=state,
                    detail=detail[:DETAIL_CHARS],
                    since=now,
                    until=now,
                )
                session.add(row)
                session.flush()
                assert row.id is not None
                still[platform] = OpenSpan(row.id, state)
            return still

        return eng.with_retry(self.engine, work, self.patience, keys=())

    def spans(self, since: datetime, until: datetime | None = None) -> list[PlatformSpan]:
        """Every span that overlaps `since`..`until` (now when None), oldest first."""
        query = select(PlatformSpan).where(col(PlatformSpan.until) >= since)
        if until is not None:
            query = query.where(col(PlatformSpan.since) <= until)
        with eng.reading(self.engine) as session:
            rows = list(session.exec(query.order_by(col(PlatformSpan.since), col(PlatformSpan.id))))
        for row in rows:
            row.since, row.until = as_utc(row.since), as_utc(row.until)
        return rows

    def prune(self, now: datetime | None = None) -> int:
        """Forget the spans that ended more than KEPT_DAYS ago; how many."""
        cutoff = (now or utcnow()) - timedelta(days=KEPT_DAYS)

        def work(session: Session) -> int:
            done = session.execute(delete(PlatformSpan).where(col(PlatformSpan.until) < cutoff))
            return int(getattr(done, "rowcount", 0) or 0)

        return eng.with_retry(self.engine, work, self.patience, keys=())
