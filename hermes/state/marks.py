"""Where each chat was last read on a platform that does not redeliver what was sent
while no one was connected (Discord: a new gateway session replays nothing). The
gateway notes the last message it received in each chat (a few seconds' worth in one
write) and, when the platform connects again, fetches what came after
(gateway/catch_up.py). A mark only moves forward."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import PlatformMark, utcnow


@dataclass(frozen=True, slots=True)
class Mark:
    platform: str
    chat_id: str
    chat_type: str
    thread_id: str | None
    message_id: str  # as the adapter gave it
    position: int  # the platform's order of messages in the chat


_NOTE = text(
    "INSERT INTO platform_marks "
    "(platform, chat_id, chat_type, thread_id, message_id, position, seen_at) "
    "VALUES (:platform, :chat, :type, :thread, :message, :position, :now) "
    "ON CONFLICT (platform, chat_id) DO UPDATE SET chat_type = excluded.chat_type, "
    "thread_id = excluded.thread_id, message_id = excluded.message_id, "
    "position = excluded.position, seen_at = excluded.seen_at "
    "WHERE excluded.position > platform_marks.position"
)


class MarksDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    def note(self, marks: Sequence[Mark]) -> None:
        """Each chat's mark moved to `marks`' (never back), in one transaction."""
        if not marks:
            return
        now = eng.sql_time(utcnow())
        rows = [
            {
                "platform": m.platform,
                "chat": m.chat_id,
                "type": m.chat_type,
                "thread": m.thread_id,
                "message": m.message_id,
                "position": m.position,
                "now": now,
            }
            for m in marks
        ]

        def work(session: Session) -> None:
            session.execute(_NOTE, rows)

        eng.with_retry(self.engine, work, self.patience, keys=())

    def recent(self, platform: str, since: datetime, limit: int) -> list[Mark]:
        """The marks of `platform`'s chats read since `since`, the latest first."""
        query = (
            select(PlatformMark)
            .where(PlatformMark.platform == platform, col(PlatformMark.seen_at) >= since)
            .order_by(col(PlatformMark.seen_at).desc())
            .limit(limit)
        )
        with eng.reading(self.engine) as session:
            return [
                Mark(r.platform, r.chat_id, r.chat_type, r.thread_id, r.message_id, r.position)
                for r in session.exec(query)
            ]


__all__ = ["Mark", "MarksDB"]
