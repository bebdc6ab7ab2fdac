"""Reminders and scheduled messages in state.db, and the claim that makes a run once.

A reminder's next run is `due_at` (UTC). Whoever delivers a run first inserts its row in
`reminder_runs` (reminder, due time): the primary key is the lock, so two gateways on
one state.db, or a gateway retrying after a crash, can never both send it. A run that
failed before anything was posted may be claimed again (a retry); one whose outcome is
unknown (the platform may have posted it) never is.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, update
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import Reminder, ReminderRun, User, as_utc, utcnow

ID_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: typed from a phone
LIVE = ("active", "paused")
ZONE_TTL_S = 10.0
MAX_CACHED_ZONES = 10_000


def new_reminder_id() -> str:
    return "".join(secrets.choice(ID_ALPHABET) for _ in range(6))


@dataclass(frozen=True, slots=True)
class Claim:
    reminder: Reminder
    due_at: datetime
    attempt: int  # 1 for the first delivery of this run


def reminders_key(user_id: str) -> str:
    """The lock (on PostgreSQL) of a person's list of reminders (a new one is counted
    against their cap under it)."""
    return f"reminders-of:{user_id}"


class RemindersDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience
        # every turn reads its person's zone: kept briefly (a change made by another
        # process shows within ZONE_TTL_S; this process's own changes at once)
        self._zones: dict[str, tuple[str | None, float]] = {}

    def _write(self, work: Any, keys: eng.Keys) -> Any:
        return eng.with_retry(self.engine, work, self.patience, keys=keys)

    # -- time zones ----------------------------------------------------------------------

    def timezone(self, user_id: str) -> str | None:
        cached = self._zones.get(user_id)
        if cached is not None and time.monotonic() - cached[1] < ZONE_TTL_S:
            return cached[0]
        with eng.reading(self.engine) as session:
            user = session.get(User, user_id)
            zone = user.timezone if user is not None else None
        if len(self._zones) >= MAX_CACHED_ZONES:
            self._zones.clear()
        self._zones[user_id] = (zone, time.monotonic())
        return zone

    def set_timezone(self, user_id: str, timezone: str | None) -> bool:
        def work(session: Session) -> bool:
            result = session.execute(
                update(User).where(col(User.id) == user_id).values(timezone=timezone)
            )
            return bool(getattr(result, "rowcount", 0))

        self._zones.pop(user_id, None)
        return bool(self._write(work, ()))  # one row's update: the row's own lock

    # -- reminders -----------------------------------------------------------------------

    def add(self, limit: int, reminder: Reminder) -> Reminder | None:
        """Store `reminder`, or None when its person has `limit` live ones already
        (counted in the same write transaction: concurrent adds cannot pass the cap)."""

        def work(session: Session) -> Reminder | None:
            live = select(func.count()).where(
                Reminder.user_id == reminder.user_id, col(Reminder.status).in_(LIVE)
            )
            if session.exec(live).one() >= limit:
                return None
            while session.get(Reminder, reminder.id) is not None:  # 31^6: rare, but possible
                reminder.id = new_reminder_id()
            session.add(reminder)
            session.flush()
            session.refresh(reminder)
            session.expunge(reminder)
            return reminder

        # the person's count is read, then added to: their adds go one at a time
        result: Reminder | None = self._write(work, [reminders_key(reminder.user_id)])
        return result

    def get(self, reminder_id: str) -> Reminder | None:
        with eng.reading(self.engine) as session:
            return session.get(Reminder, reminder_id.strip().upper())

    def of_user(self, user_id: str | None = None, *, live_only: bool = True) -> list[Reminder]:
        """A person's reminders (everyone's with None), the next due first."""
        with eng.reading(self.engine) as session:
            query = select(Reminder)
            if user_id is not None:
                query = query.where(Reminder.user_id == user_id)
            if live_only:
                query = query.where(col(Reminder.status).in_(LIVE))
            query = query.order_by(col(Reminder.due_at).is_(None), col(Reminder.due_at))
            return list(session.exec(query))

    def due(self, now: datetime, platforms: tuple[str, ...], limit: int = 100) -> list[Reminder]:
        """Active reminders due by `now` on these platforms, the oldest first."""
        with eng.reading(self.engine) as session:
            query = (
                select(Reminder)
                .where(
                    Reminder.status == "active",
                    col(Reminder.due_at) <= now,
                    func.coalesce(Reminder.retry_at, Reminder.due_at) <= now,
                    col(Reminder.platform).in_(platforms),
                )
                .order_by(col(Reminder.due_at))
                .limit(limit)
            )
            return list(session.exec(query))

    def cancel(self, reminder_id: str, user_id: str | None = None) -> Reminder | None:
        """Cancel a live reminder (of `user_id` only, when given); the row, or None."""

        def work(session: Session) -> Reminder | None:
            row = session.get(Reminder, reminder_id.strip().upper())
            if row is None or row.status not in LIVE:
                return None
            if user_id is not None and row.user_id != user_id:
                return None
            row.status, row.due_at = "cancelled", None
            session.add(row)
            session.flush()
            session.expunge(row)
            return row

        result: Reminder | None = self._write(work, [_key(reminder_id)])
        return result

    def pause(self, reminder_id: str, reason: str) -> None:
        def work(session: Session) -> None:
            row = session.get(Reminder, reminder_id)
            if row is not None and row.status == "active":
                row.status, row.reason = "paused", reason
                session.add(row)

        self._write(work, [_key(reminder_id)])

    # -- runs ------------------------------------------------------------------------------

    def claim(self, reminder_id: str, by: str, max_attempts: int, now: datetime) -> Claim | None:
        """Take the reminder's current run to deliver it; None when it is not due at
        `now` (not yet, or waiting for its retry), was delivered (or may have been), or
        someone else is delivering it. Whether it is due is read here, in the claim's
        transaction: a run another process just finished has moved the reminder on to
        its next time, which must not be taken for due."""

        def work(session: Session) -> Claim | None:
            row = session.get(Reminder, reminder_id)
            if row is None or row.status != "active" or row.due_at is None:
                return None
            if as_utc(row.due_at) > now or (row.retry_at and as_utc(row.retry_at) > now):
                return None
            run = session.get(ReminderRun, (reminder_id, row.due_at))
            if run is None:
                session.add(
                    ReminderRun(
                        reminder_id=reminder_id, due_at=row.due_at, claimed_by=by, attempts=1
                    )
                )
                session.flush()
                session.expunge(row)
                return Claim(row, row.due_at, 1)
            if run.status != "failed" or run.attempts >= max_attempts:
                return None  # delivered, unknown, being sent, or out of attempts
            run.status, run.claimed_by, run.claimed_at = "sending", by, utcnow()
            run.attempts += 1
            session.add(run)
            session.flush()
            attempt = run.attempts
            session.expunge(row)
            return Claim(row, row.due_at, attempt)

        result: Claim | None = self._write(work, [_key(reminder_id)])
        return result

    def finish(
        self,
        claim: Claim,
        status: str,
        *,
        next_due: datetime | None,
        error: str = "",
        late: bool = False,
        retry_at: datetime | None = None,
    ) -> None:
        """Record how the run went, and move the reminder on: to `next_due` (None: done),
        or, for a failed run to be retried, to `retry_at` with the same run kept."""

        def work(session: Session) -> None:
            run = session.get(ReminderRun, (claim.reminder.id, claim.due_at))
            if run is not None:
                run.status, run.error, run.late = status, error[:500], late
                run.finished_at = utcnow()
                session.add(run)
            row = session.get(Reminder, claim.reminder.id)
            if row is None:
                return
            if status == "failed" and retry_at is not None:
                row.failures += 1
                row.retry_at = retry_at  # the same run (due_at unchanged), tried again then
                session.add(row)
                return
            row.retry_at = None
            row.runs += 1 if status in ("delivered", "unknown") else 0
            row.failures = 0
            row.last_run_at = utcnow()
            if row.status == "active":
                row.due_at = next_due
                if next_due is None:
                    row.status = "done"
            session.add(row)

        self._write(work, [_key(claim.reminder.id)])

    def runs(self, reminder_id: str) -> list[ReminderRun]:
        with eng.reading(self.engine) as session:
            query = (
                select(ReminderRun)
                .where(ReminderRun.reminder_id == reminder_id)
                .order_by(col(ReminderRun.due_at))
            )
            return list(session.exec(query))


def _key(reminder_id: str) -> str:
    """A reminder's lock: its runs are claimed and finished one writer at a time."""
    return f"reminder:{reminder_id.strip().upper()}"


__all__ = ["Claim", "RemindersDB", "new_reminder_id", "reminders_key"]
