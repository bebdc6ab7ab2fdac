"""The memory log in state.db: every change of a person's stores (events with their
cause, whole-store versions for exact undo), consolidation bookkeeping and the one-line
notices owed to a user. The files stay the source of truth; this is their history."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, or_, update
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import (
    ConsolidationState,
    MemoryEvent,
    MemoryIntent,
    MemoryVersion,
    User,
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
class MemoryEventRecord:
    user_id: str
    target: str
    action: str
    entry_before: str | None
    entry_after: str | None
    actor: str
    session_id: str | None = None
    message_id: int | None = None


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
            for user_id in user_ids:
                if session.get(User, user_id) is None:
                    session.add(User(id=user_id))
            session.flush()
            session.add_all(MemoryEvent(**_fields(event)) for event in events)
            if version is not None:
                session.add(MemoryVersion(**_fields(version)))

        eng.with_retry(self.engine, work, self.patience)

    # -- crash-safe changes: intent first, completed once the file holds the new text ----

    def begin_change(self, events: Sequence[MemoryEventRecord], version: VersionRecord) -> int:
        """Record what is about to be written; returns the intent's id."""
        planned = json.dumps(
            {"events": [_fields(e) for e in events], "version": _fields(version)},
            ensure_ascii=False,
        )
        intent = MemoryIntent(
            user_id=version.user_id,
            target=version.target,
            text_before=version.text_before,
            text_after=version.text_after,
            planned=planned,
        )

        def work(session: Session) -> int:
            session.add(intent)
            session.flush()
            assert intent.id is not None
            return intent.id

        return eng.with_retry(self.engine, work, self.patience)

    def complete_change(self, intent_id: int) -> bool:
        """The file holds the intent's text: log its events and version (one transaction).
        False when there was no such intent (settled already)."""

        def work(session: Session) -> bool:
            intent = session.get(MemoryIntent, intent_id)
            if intent is None:
                return False
            planned = json.loads(intent.planned)
            if session.get(User, intent.user_id) is None:
                session.add(User(id=intent.user_id))
                session.flush()
            session.add_all(MemoryEvent(**fields) for fields in planned["events"])
            session.add(MemoryVersion(**planned["version"]))
            session.delete(intent)
            return True

        return eng.with_retry(self.engine, work, self.patience)

    def drop_change(self, intent_id: int) -> None:
        """The file never got the intent's text: forget it."""
        eng.with_retry(
            self.engine,
            lambda session: session.execute(
                delete(MemoryIntent).where(col(MemoryIntent.id) == intent_id)
            ),
            self.patience,
        )

    def open_changes(self, user_id: str, target: str) -> list[MemoryIntent]:
        with eng.reading(self.engine) as session:
            query = (
                select(MemoryIntent)
                .where(MemoryIntent.user_id == user_id, MemoryIntent.target == target)
                .order_by(col(MemoryIntent.id))
            )
            return list(session.exec(query))

    def expected_text(self, user_id: str, target: str) -> str | None:
        """What the store should hold after its last recorded change (None: no history)."""
        with eng.reading(self.engine) as session:
            query = (
                select(MemoryVersion)
                .where(MemoryVersion.user_id == user_id, MemoryVersion.target == target)
                .order_by(col(MemoryVersion.id).desc())
                .limit(1)
            )
            last = session.exec(query).first()
        if last is None:
            return None
        return last.text_before if last.undone_at is not None else last.text_after

    def last_version(self, user_id: str) -> MemoryVersion | None:
        with eng.reading(self.engine) as session:
            query = (
                select(MemoryVersion)
                .where(MemoryVersion.user_id == user_id, col(MemoryVersion.undone_at).is_(None))
                .order_by(col(MemoryVersion.id).desc())
                .limit(1)
            )
            return session.exec(query).first()

    def mark_undone(self, version_id: int, event: MemoryEventRecord) -> None:
        def work(session: Session) -> None:
            session.execute(
                update(MemoryVersion)
                .where(col(MemoryVersion.id) == version_id)
                .values(undone_at=utcnow())
            )
            session.add(MemoryEvent(**_fields(event)))

        eng.with_retry(self.engine, work, self.patience)

    def consolidation_state(self, user_id: str, target: str) -> ConsolidationState:
        with eng.reading(self.engine) as session:
            row = session.get(ConsolidationState, (user_id, target))
            return row or ConsolidationState(user_id=user_id, target=target)

    def update_consolidation_state(self, user_id: str, target: str, **values: Any) -> None:
        def work(session: Session) -> None:
            if session.get(User, user_id) is None:
                session.add(User(id=user_id))
                session.flush()
            row = session.get(ConsolidationState, (user_id, target))
            row = row or ConsolidationState(user_id=user_id, target=target)
            for name, value in values.items():
                setattr(row, name, value)
            session.add(row)

        eng.with_retry(self.engine, work, self.patience)

    def take_notices(self, user_id: str) -> list[str]:
        """Pending one-line notices for a user (e.g. 'memory was consolidated'), cleared."""

        with self.engine.connect() as conn:  # every turn asks: nothing pending, no write
            pending = conn.exec_driver_sql(_ANY_NOTICE, (user_id,)).first()
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

        return eng.with_retry(self.engine, work, self.patience)

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


_ANY_NOTICE = (
    "SELECT 1 FROM consolidation_state WHERE user_id = ? AND notice_pending IS NOT NULL LIMIT 1"
)
