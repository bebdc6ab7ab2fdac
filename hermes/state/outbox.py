"""External memory providers' outbox: every write for a provider kept in state.db until
the provider has taken it, so a service that is down loses nothing.

A write is data, not a call: its kind (`sync_turn`, `memory_write`, `session_switch`,
`session_end`; `merge_people`, a link, for a provider kept on a service) and a JSON
payload, one row each, delivered in `id` order per person and provider. Delivery is at
least once (a call that timed out may have been applied and is tried again): providers
take a repeat without harm.

One person's rows are delivered one at a time: `claim` leases the person's oldest row
to its caller (a gateway's instance id) for a while, and nobody claims that person's
rows while a lease is live, the caller's own included (the claim runs in a write
transaction: BEGIN IMMEDIATE on SQLite, under the person's lock on PostgreSQL, so two
gateways cannot both see the person free). A deliverer that dies leaves a lease that runs out.
A link moves the rows of the person who is gone, a leased one too, to the one who
stays, before its own `merge_people`: a write in flight to the old namespace is done
(or has failed, and goes again, to the new one) before the service moves that
namespace, so nothing lands in a namespace already moved.

Bounded by construction: at most MAX_ROWS rows per person and provider (the oldest go
first when a new one comes), none older than MAX_AGE (`prune`), none tried more than
MAX_ATTEMPTS times, a payload at most MAX_PAYLOAD characters (a larger one is refused:
the caller trims it). What was given
up is counted per person (`provider_outbox_drops`) for the status line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import delete, func, update
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import OutboxDrop, OutboxEntry, as_utc, utcnow

T = TypeVar("T")
KINDS = frozenset({"sync_turn", "memory_write", "session_switch", "session_end", "merge_people"})
MAX_ROWS = 1_000  # per person and provider
MAX_AGE = timedelta(days=14)
MAX_PAYLOAD = 256_000  # characters of JSON
MAX_ERROR = 500
MAX_ATTEMPTS = 50  # a write refused this often (hours of retries) is given up on


class PayloadTooLargeError(ValueError):
    """A write's payload is over MAX_PAYLOAD characters."""


@dataclass(frozen=True, slots=True)
class OutboxItem:
    id: int
    provider: str
    user_id: str
    kind: str
    payload: dict[str, Any]
    created_at: datetime
    attempts: int


@dataclass(frozen=True, slots=True)
class OutboxStatus:
    waiting: int  # rows not yet delivered
    people: int  # people with rows waiting
    oldest: datetime | None  # when the oldest waiting row was written
    last_error: str  # the latest failure of a waiting row ('' when none)
    dropped: int  # rows given up on, since the database began
    last_dropped: datetime | None
    drop_reason: str


def outbox_key(provider: str, user_id: str) -> str:
    """The lock (on PostgreSQL) of one person's rows for one provider: adding, claiming,
    failing and pruning them take it, and a link's move (hermes/state/people.py)."""
    return f"outbox:{provider}:{user_id}"


def new_rows_key(user_id: str) -> str:
    """The lock (on PostgreSQL) a new row of a person's, for any provider, is added
    under: a link locks it too, so a row being added while the link reads the
    providers it must lock (one it had never met) is moved, not left behind."""
    return f"outbox-new:{user_id}"


def _person_key(provider: str, user_id: str) -> list[str]:
    return [outbox_key(provider, user_id)]


class OutboxDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    def _write(self, work: Callable[[Session], T], keys: eng.Keys) -> T:
        return eng.with_retry(self.engine, work, self.patience, keys=keys)

    def add(self, provider: str, user_id: str, kind: str, payload: dict[str, Any]) -> int:
        """Keep a write for `provider` about `user_id`; its id. The person's oldest rows
        go (counted as dropped) when they have MAX_ROWS already."""
        if kind not in KINDS:
            raise ValueError(f"unknown provider write {kind!r}")
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        if len(text) > MAX_PAYLOAD:
            raise PayloadTooLargeError(f"{kind} payload of {len(text):,} characters")

        def work(session: Session) -> int:
            row = OutboxEntry(provider=provider, user_id=user_id, kind=kind, payload=text)
            session.add(row)
            session.flush()
            assert row.id is not None
            over = _count(session, provider, user_id) - MAX_ROWS
            if over > 0:
                oldest = select(OutboxEntry.id).where(*_person(provider, user_id))
                ids = list(session.exec(oldest.order_by(col(OutboxEntry.id)).limit(over)))
                session.execute(delete(OutboxEntry).where(col(OutboxEntry.id).in_(ids)))
                _dropped(session, provider, user_id, len(ids), f"over {MAX_ROWS:,} waiting")
            return row.id

        return self._write(work, [*_person_key(provider, user_id), new_rows_key(user_id)])

    def claim(
        self, provider: str, user_id: str, deliverer: str, lease: timedelta
    ) -> OutboxItem | None:
        """The person's oldest waiting write, leased to `deliverer` for `lease`; None
        when nothing waits or a live lease is held on one of their rows (by any
        deliverer: in one gateway too, the rows of two people it delivers for become
        one person's when they are linked)."""

        def work(session: Session) -> OutboxItem | None:
            now = utcnow()
            held = select(func.count()).where(
                *_person(provider, user_id),
                col(OutboxEntry.leased_by) != "",
                col(OutboxEntry.lease_until) > now,
            )
            if session.exec(held).one():
                return None
            first = select(OutboxEntry).where(*_person(provider, user_id))
            row = session.exec(first.order_by(col(OutboxEntry.id)).limit(1)).first()
            if row is None:
                return None
            row.leased_by, row.lease_until = deliverer, now + lease
            session.add(row)
            return _item(row)

        return self._write(work, _person_key(provider, user_id))

    def in_flight(self, provider: str, user_id: str) -> bool:
        """Whether a write of the person's is at the provider now (a live lease)."""
        query = select(func.count()).where(
            *_person(provider, user_id),
            col(OutboxEntry.leased_by) != "",
            col(OutboxEntry.lease_until) > utcnow(),
        )
        with eng.reading(self.engine) as session:
            return bool(session.exec(query).one())

    def done(self, item_id: int) -> None:
        """The provider took the write: it is gone."""
        self._write(
            lambda s: s.execute(delete(OutboxEntry).where(col(OutboxEntry.id) == item_id)), keys=()
        )

    def failed(self, item_id: int, error: str) -> bool:
        """The provider did not take it: it stays first in line, its lease ends; after
        MAX_ATTEMPTS it is given up on (counted as dropped): a write the service refuses
        for good must not hold the person's later writes back forever. True when kept."""

        def work(session: Session) -> bool:
            row = session.get(OutboxEntry, item_id)
            if row is None:
                return False
            eng.lock_keys(session, _person_key(row.provider, row.user_id))
            row = session.get(OutboxEntry, item_id, populate_existing=True)  # under the lock
            if row is None:
                return False
            if row.attempts + 1 >= MAX_ATTEMPTS:
                session.delete(row)
                why = f"refused {MAX_ATTEMPTS} times: {error}"[:MAX_ERROR]
                _dropped(session, row.provider, row.user_id, 1, why)
                return False
            session.execute(
                update(OutboxEntry)
                .where(col(OutboxEntry.id) == item_id)
                .values(
                    attempts=OutboxEntry.attempts + 1,
                    last_error=error[:MAX_ERROR],
                    leased_by="",
                    lease_until=None,
                )
            )
            return True

        return self._write(work, ())  # the row read first, then its person locked

    def waiting(self, provider: str) -> list[str]:
        """The people with writes waiting for `provider` (whose delivery to resume)."""
        query = select(OutboxEntry.user_id).where(col(OutboxEntry.provider) == provider)
        with eng.reading(self.engine) as session:
            return sorted(set(session.exec(query.distinct())))

    def pending(self, provider: str, user_id: str) -> list[OutboxItem]:
        """The person's waiting writes, in delivery order."""
        query = select(OutboxEntry).where(*_person(provider, user_id))
        with eng.reading(self.engine) as session:
            rows = list(session.exec(query.order_by(col(OutboxEntry.id))))
        return [_item(row) for row in rows]

    def prune(self, now: datetime | None = None) -> int:
        """Give up on writes older than MAX_AGE (counted per person); how many."""
        cutoff = (now or utcnow()) - MAX_AGE

        people = select(OutboxEntry.provider, OutboxEntry.user_id).where(
            col(OutboxEntry.created_at) < cutoff
        )
        with eng.reading(self.engine) as session:
            found = sorted(set(session.exec(people.distinct())))

        def prune_one(provider: str, user_id: str) -> int:
            def work(session: Session) -> int:
                old = (*_person(provider, user_id), col(OutboxEntry.created_at) < cutoff)
                result = session.execute(delete(OutboxEntry).where(*old))
                n = int(getattr(result, "rowcount", 0) or 0)
                _dropped(session, provider, user_id, n, f"older than {MAX_AGE.days} days")
                return n

            return self._write(work, _person_key(provider, user_id))

        # one person at a time, each under their own lock (a day's prune of many people
        # never holds everyone's at once)
        return sum(prune_one(provider, user_id) for provider, user_id in found)

    def status(self, provider: str, user_id: str | None = None) -> OutboxStatus:
        """What waits for `provider` (for one person, or everyone) and what was dropped."""
        where = [col(OutboxEntry.provider) == provider]
        drops_where = [col(OutboxDrop.provider) == provider]
        if user_id is not None:
            where.append(col(OutboxEntry.user_id) == user_id)
            drops_where.append(col(OutboxDrop.user_id) == user_id)
        with eng.reading(self.engine) as session:
            waiting, people, oldest = session.exec(
                select(
                    func.count(),
                    func.count(func.distinct(OutboxEntry.user_id)),
                    func.min(OutboxEntry.created_at),
                ).where(*where)
            ).one()
            error = session.exec(
                select(OutboxEntry.last_error)
                .where(*where, col(OutboxEntry.last_error) != "")
                .order_by(col(OutboxEntry.id).desc())
                .limit(1)
            ).first()
            drops = list(session.exec(select(OutboxDrop).where(*drops_where)))
        latest = max(drops, key=lambda d: as_utc(d.last_at), default=None)
        return OutboxStatus(
            int(waiting),
            int(people),
            as_utc(oldest) if oldest is not None else None,
            error or "",
            sum(d.dropped for d in drops),
            as_utc(latest.last_at) if latest is not None else None,
            latest.reason if latest is not None else "",
        )


def _item(row: OutboxEntry) -> OutboxItem:
    assert row.id is not None
    payload = json.loads(row.payload)
    return OutboxItem(
        row.id, row.provider, row.user_id, row.kind, payload, as_utc(row.created_at), row.attempts
    )


def _person(provider: str, user_id: str) -> tuple[Any, Any]:
    return col(OutboxEntry.provider) == provider, col(OutboxEntry.user_id) == user_id


def _count(session: Session, provider: str, user_id: str) -> int:
    query = select(func.count()).where(*_person(provider, user_id))
    return int(session.exec(query).one())


def _dropped(session: Session, provider: str, user_id: str, n: int, reason: str) -> None:
    if n <= 0:
        return
    row = session.get(OutboxDrop, (provider, user_id))
    if row is None:
        row = OutboxDrop(provider=provider, user_id=user_id)
    row.dropped += n
    row.last_at, row.reason = utcnow(), reason
    session.add(row)


__all__ = [
    "MAX_AGE",
    "MAX_ATTEMPTS",
    "MAX_ROWS",
    "OutboxDB",
    "OutboxItem",
    "OutboxStatus",
    "new_rows_key",
    "outbox_key",
]
