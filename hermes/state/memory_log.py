"""The memory log in state.db: every change of a person's stores (events with their
cause, whole-store versions for exact undo), consolidation bookkeeping and the one-line
notices owed to a user. The files stay the source of truth; this is their history."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import func, or_, text
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import (
    ConsolidationRun,
    ConsolidationState,
    MemoryEvent,
    MemoryPending,
    MemoryVersion,
    utcnow,
)


@dataclass(frozen=True, slots=True)
class VersionRecord:
    user_id: str
    target: str
    text_before: str
    text_after: str
    actor: str
    reason: str = ""
    pending_before: str | None = None  # the waiting-entries file, when the change touched it
    pending_after: str | None = None


@dataclass(frozen=True, slots=True)
class Intent:
    """A change recorded before its files were replaced, not yet completed."""

    id: int
    text_after: str  # what the store's file holds once the change is made
    pending_after: str | None  # and its waiting-entries file, when the change touched it

    def made(self, raw: str, pending_raw: str) -> bool:
        """Whether files reading `raw` (and `pending_raw`) hold this change."""
        return raw == self.text_after and self.pending_after in (None, pending_raw)


def _intent(intent_id: int, text_after: str, planned: str) -> Intent:
    pending = json.loads(planned).get("version", {}).get("pending_after")
    return Intent(int(intent_id), str(text_after), pending)


@dataclass(frozen=True, slots=True)
class MemoryEventRecord:
    user_id: str
    target: str
    action: str
    entry_before: str | None
    entry_after: str | None
    actor: str
    session_id: str | None = None
    message_id: int | None = None


class Held(StrEnum):
    """What became of a write offered to be held (`MemoryLogDB.hold_pending`)."""

    HELD = "held"
    ALREADY = "already held"  # the same write of the same person
    FULL = "full"  # the person has as many held as may be


_MAKE_USER = text("INSERT INTO users (id, created_at) VALUES (:id, :now) ON CONFLICT DO NOTHING")


def ensure_users(session: Session, user_ids: Iterable[str]) -> None:
    """These people's rows, made when missing: one statement each that never collides
    with another writer making the same one (they may hold other keys)."""
    now = eng.sql_time(utcnow())
    for user_id in sorted(set(user_ids)):
        session.execute(_MAKE_USER, {"id": user_id, "now": now})


def memory_keys(user_ids: Iterable[str]) -> list[str]:
    """The locks (on PostgreSQL) of these people's memory: their stores, their log's
    rows, their consolidation state (hermes/state/engine.py `Keys`)."""
    return [f"memory:{user_id}" for user_id in sorted(set(user_ids))]


class MemoryLogDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    def record_memory_event(self, event: MemoryEventRecord) -> None:
        self.record_memory_change([event], None)

    def record_memory_change(
        self, events: Sequence[MemoryEventRecord], version: VersionRecord | None
    ) -> None:
        """Events and the before/after version of one store change, in one transaction."""

        def work(session: Session) -> None:
            user_ids = {e.user_id for e in events} | ({version.user_id} if version else set())
            ensure_users(session, user_ids)
            session.add_all(MemoryEvent(**_fields(event)) for event in events)
            if version is not None:
                session.add(MemoryVersion(**_fields(version)))

        people = {e.user_id for e in events} | ({version.user_id} if version else set())
        eng.with_retry(self.engine, work, self.patience, keys=memory_keys(people))

    # -- crash-safe changes: intent first, completed once the file holds the new text ----

    def begin_change(
        self,
        events: Sequence[MemoryEventRecord],
        version: VersionRecord,
        *,
        undoes: int | None = None,
    ) -> int:
        """Record what is about to be written; returns the intent's id. `version` says
        what the store(s) go from and to; it is logged as a new version, or, with
        `undoes`, that version is marked undone instead. (Plain SQL on the pooled
        connection: every memory change pays for this and complete_change.)"""
        # the texts are the intent's own columns, never copied into `planned`: every
        # byte here is written twice (the intent, then its completion)
        version_fields = _fields(version)
        del version_fields["text_before"], version_fields["text_after"]
        planned: dict[str, Any] = {"events": [_fields(e) for e in events]}
        planned["version"] = version_fields
        if undoes is not None:
            planned["undoes"] = undoes
        row = (
            version.user_id,
            version.target,
            version.text_before,
            version.text_after,
            json.dumps(planned, ensure_ascii=False),
            eng.sql_time(utcnow()),
        )

        def work(raw: eng.RawConnection) -> int:
            return int(raw.execute(_INSERT_INTENT, row).fetchone()[0])

        return eng.with_raw_retry(self.engine, work, self.patience, begin="APPEND")

    def complete_change(self, intent_id: int, versions: list[int] | None = None) -> bool:
        """The file holds the intent's text: log its events and version (one transaction;
        the new version's id is added to `versions`). False when there was no such
        intent (settled already)."""

        def work(raw: eng.RawConnection) -> tuple[bool, int | None]:
            found = raw.execute(_PLANNED, (intent_id,)).fetchone()
            if found is None:
                return False, None
            planned = json.loads(found[0])
            version = {**planned["version"], "text_before": found[1], "text_after": found[2]}
            logged = _log(raw, planned["events"], version, planned.get("undoes"))
            raw.execute(_DELETE_INTENT, (intent_id,))
            return True, logged

        # the intent's lock: the writer and a reconcile never complete it both
        keys = [f"intent:{intent_id}"]
        done, logged = eng.with_raw_retry(self.engine, work, self.patience, keys=keys)
        if versions is not None and logged is not None:
            versions.append(logged)
        return done

    def log_change(
        self,
        events: Sequence[MemoryEventRecord],
        version: VersionRecord,
        *,
        undoes: int | None = None,
        versions: list[int] | None = None,
    ) -> None:
        """What `begin_change` and `complete_change` record, at once: for a store whose
        change commits in the same transaction as this (memory.backend: database), where
        there is nothing for an intent to protect."""
        fields = [_fields(e) for e in events]

        def work(raw: eng.RawConnection) -> int | None:
            return _log(raw, fields, _fields(version), undoes)

        people = {e.user_id for e in events} | {version.user_id}
        logged = eng.with_raw_retry(self.engine, work, self.patience, keys=memory_keys(people))
        if versions is not None and logged is not None:
            versions.append(logged)

    def drop_change(self, intent_id: int) -> None:
        """The file never got the intent's text: forget it."""
        eng.with_raw_retry(
            self.engine,
            lambda raw: raw.execute(_DELETE_INTENT, (intent_id,)),
            self.patience,
            keys=[f"intent:{intent_id}"],
        )

    def expected_text(self, user_id: str, target: str) -> str | None:
        """What the store should hold after its last recorded change (None: no history)."""
        return self.unsettled(user_id, target)[1]

    def unsettled(self, user_id: str, target: str) -> tuple[list[Intent], str | None]:
        """(open intents, expected text) of one store, in one read."""

        def read(raw: eng.RawConnection) -> tuple[list[Any], Any]:
            intents = raw.execute(_OPEN_INTENTS, (user_id, target)).fetchall()
            return intents, raw.execute(_LAST_VERSION, (user_id, target)).fetchone()

        intents, last = eng.with_raw_retry(self.engine, read, self.patience, begin="DEFERRED")
        expected = None if last is None else (last[0] if last[2] else last[1])
        return [_intent(*row) for row in intents], expected

    def last_version(self, user_id: str) -> MemoryVersion | None:
        with eng.reading(self.engine) as session:
            query = (
                select(MemoryVersion)
                .where(MemoryVersion.user_id == user_id, col(MemoryVersion.undone_at).is_(None))
                .order_by(col(MemoryVersion.id).desc())
                .limit(1)
            )
            return session.exec(query).first()

    def history(self, user_id: str, limit: int = 50) -> list[MemoryVersion]:
        """The person's store changes, newest first (undone ones too, marked)."""
        with eng.reading(self.engine) as session:
            query = (
                select(MemoryVersion)
                .where(MemoryVersion.user_id == user_id)
                .order_by(col(MemoryVersion.id).desc())
                .limit(limit)
            )
            return list(session.exec(query))

    def log_consolidation(self, run: ConsolidationRun) -> None:
        def work(session: Session) -> None:
            session.add(run)

        eng.with_retry(self.engine, work, self.patience, keys=())  # a new row

    def consolidation_runs(
        self, user_id: str, limit: int = 30, before: int | None = None
    ) -> list[ConsolidationRun]:
        """The person's consolidations, newest first (those older than run `before`)."""
        with eng.reading(self.engine) as session:
            query = select(ConsolidationRun).where(ConsolidationRun.user_id == user_id)
            if before is not None:
                query = query.where(col(ConsolidationRun.id) < before)
            query = query.order_by(col(ConsolidationRun.id).desc()).limit(limit)
            return list(session.exec(query))

    def versions(self, user_id: str, ids: Iterable[int]) -> dict[int, MemoryVersion]:
        """The person's store changes of these ids."""
        wanted = list(ids)
        if not wanted:
            return {}
        with eng.reading(self.engine) as session:
            query = select(MemoryVersion).where(
                MemoryVersion.user_id == user_id, col(MemoryVersion.id).in_(wanted)
            )
            return {v.id: v for v in session.exec(query) if v.id is not None}

    def consolidation_state(self, user_id: str, target: str) -> ConsolidationState:
        with eng.reading(self.engine) as session:
            row = session.get(ConsolidationState, (user_id, target))
            return row or ConsolidationState(user_id=user_id, target=target)

    def update_consolidation_state(self, user_id: str, target: str, **values: Any) -> None:
        def work(session: Session) -> None:
            ensure_users(session, [user_id])
            row = session.get(ConsolidationState, (user_id, target))
            row = row or ConsolidationState(user_id=user_id, target=target)
            for name, value in values.items():
                setattr(row, name, value)
            session.add(row)

        eng.with_retry(self.engine, work, self.patience, keys=memory_keys([user_id]))

    def take_notices(self, user_id: str) -> list[str]:
        """Pending one-line notices for a user (e.g. 'memory was consolidated'), cleared."""

        with eng.one_statement(self.engine) as conn:  # every turn asks: nothing pending
            pending = conn.execute(_ANY_NOTICE, {"u": user_id}).first()
        if pending is None:
            return []

        def work(session: Session) -> list[str]:
            rows = session.exec(
                select(ConsolidationState).where(
                    ConsolidationState.user_id == user_id,
                    col(ConsolidationState.notice_pending).is_not(None),
                )
            ).all()
            notices = [row.notice_pending for row in rows if row.notice_pending]
            for row in rows:
                row.notice_pending = None
                session.add(row)
            return notices

        return eng.with_retry(self.engine, work, self.patience, keys=memory_keys([user_id]))

    # -- writes held for the memory guard's model ----------------------------------------

    def hold_pending(self, held: MemoryPending, cap: int) -> Held:
        """Keep a write the guard's model could not judge, unless the same write of the
        same person is held already (the agent asked twice) or `cap` of theirs are
        (decided in the one transaction: two turns at once cannot both pass the cap)."""

        def work(session: Session) -> Held:
            same = select(MemoryPending.id).where(
                MemoryPending.user_id == held.user_id, MemoryPending.args == held.args
            )
            if session.exec(same).first() is not None:
                return Held.ALREADY
            count = select(func.count()).where(MemoryPending.user_id == held.user_id)
            if int(session.exec(count).one()) >= cap:
                return Held.FULL
            session.add(held)
            return Held.HELD

        return eng.with_retry(self.engine, work, self.patience, keys=memory_keys([held.user_id]))

    def pending_writes(
        self, user_id: str | None = None, limit: int | None = None
    ) -> list[MemoryPending]:
        """Held writes, oldest first (of one person, or of everyone; the first `limit`)."""
        with eng.reading(self.engine) as session:
            query = select(MemoryPending)
            if user_id is not None:
                query = query.where(MemoryPending.user_id == user_id)
            query = query.order_by(col(MemoryPending.id))
            if limit is not None:
                query = query.limit(limit)
            return list(session.exec(query))

    def count_pending(self, user_id: str | None = None) -> int:
        with self.engine.connect() as conn:
            if user_id is None:
                row = conn.exec_driver_sql("SELECT COUNT(*) FROM memory_pending").first()
            else:
                query = text("SELECT COUNT(*) FROM memory_pending WHERE user_id = :u")
                row = conn.execute(query, {"u": user_id}).first()
        return int(row[0]) if row else 0

    def settle_pending(self, pending_id: int, retry_reason: str | None = None) -> None:
        """Judged: remove the held write; with `retry_reason`, the model still could
        not answer, so it stays, with one more attempt counted."""

        def work(session: Session) -> None:
            row = session.get(MemoryPending, pending_id)
            if row is None:
                return
            if retry_reason is None:
                session.delete(row)
                return
            row.attempts += 1
            row.reason = retry_reason
            row.last_tried_at = utcnow()
            session.add(row)

        eng.with_retry(self.engine, work, self.patience, keys=(f"held:{pending_id}",))

    def memory_events(self, user_id: str, text: str | None = None) -> list[MemoryEvent]:
        """Events of one user, newest first; with `text`, those whose entry contains it."""
        with eng.reading(self.engine) as session:
            query = select(MemoryEvent).where(MemoryEvent.user_id == user_id)
            if text:
                query = query.where(
                    or_(
                        col(MemoryEvent.entry_after).contains(text, autoescape=True),
                        col(MemoryEvent.entry_before).contains(text, autoescape=True),
                    )
                )
            query = query.order_by(col(MemoryEvent.id).desc())
            return list(session.exec(query))


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


_ANY_NOTICE = text(
    "SELECT 1 FROM consolidation_state WHERE user_id = :u AND notice_pending IS NOT NULL LIMIT 1"
)


_EVENT_COLUMNS = (
    "user_id", "target", "action", "entry_before", "entry_after", "actor", "session_id",
    "message_id",
)  # fmt: skip
_VERSION_COLUMNS = (
    "user_id", "target", "text_before", "text_after", "actor", "reason", "pending_before",
    "pending_after",
)  # fmt: skip
_INSERT_INTENT = (
    "INSERT INTO memory_intents (user_id, target, text_before, text_after, planned, "
    "created_at) VALUES (?, ?, ?, ?, ?, ?) RETURNING id"
)
_PLANNED = "SELECT planned, text_before, text_after FROM memory_intents WHERE id = ?"
_DELETE_INTENT = "DELETE FROM memory_intents WHERE id = ?"
_ENSURE_USER = "INSERT INTO users (id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING"
_INSERT_EVENT = (
    f"INSERT INTO memory_events ({', '.join(_EVENT_COLUMNS)}, created_at) "
    f"VALUES ({', '.join('?' * (len(_EVENT_COLUMNS) + 1))})"
)
_INSERT_VERSION = (
    f"INSERT INTO memory_versions ({', '.join(_VERSION_COLUMNS)}, created_at) "
    f"VALUES ({', '.join('?' * (len(_VERSION_COLUMNS) + 1))}) RETURNING id"
)
_OPEN_INTENTS = (
    "SELECT id, text_after, planned FROM memory_intents WHERE user_id = ? AND target = ? "
    "ORDER BY id"
)
_MARK_UNDONE = "UPDATE memory_versions SET undone_at = ? WHERE id = ?"
_LAST_VERSION = (
    "SELECT text_before, text_after, undone_at IS NOT NULL FROM memory_versions "
    "WHERE user_id = ? AND target = ? ORDER BY id DESC LIMIT 1"
)


def _log(
    raw: eng.RawConnection,
    events: list[dict[str, Any]],
    version: dict[str, Any],
    undoes: int | None,
) -> int | None:
    """A change's events, and its version (or, with `undoes`, that version undone): the
    new version's id."""
    now = eng.sql_time(utcnow())
    raw.execute(_ENSURE_USER, (version["user_id"], now))
    raw.executemany(_INSERT_EVENT, [(*_event_row(e), now) for e in events])
    if undoes is not None:
        raw.execute(_MARK_UNDONE, (now, undoes))
        return None
    return int(raw.execute(_INSERT_VERSION, (*_version_row(version), now)).fetchone()[0])


def _event_row(fields: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(fields.get(name) for name in _EVENT_COLUMNS)


def _version_row(fields: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(fields.get(name) for name in _VERSION_COLUMNS)
