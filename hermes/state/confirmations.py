"""What waits for a person's yes, in state.db, and the outbox of the messages the
assistant sends to other chats (the model: `Confirmation`).

Every change of state is one conditional UPDATE, so a double press, two gateways, or
a retry after a crash moves a row once: asked -> declined, done (an MCP server allowed,
a held memory write saved) or ready (a message to send); ready -> sending (claimed by
one process) -> sent, failed or unknown. A row still asked or ready when it expires
becomes expired (a message an hour late is no longer what was asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import Confirmation, utcnow

TTL = timedelta(hours=1)  # to press a button; for a confirmed message, to be delivered
# what a yes leaves behind: the subject is consented to from then on
STOPPED_MID_SEND = "the gateway sending it stopped before the platform answered"
SAID_YES = ("done", "ready", "sending", "sent", "failed", "unknown")


class ConfirmationsDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    def add(self, row: Confirmation) -> None:
        def work(session: Session) -> None:
            session.add(row)

        eng.with_retry(self.engine, work, self.patience, keys=())

    def get(self, code: str) -> Confirmation | None:
        with eng.reading(self.engine) as session:
            return session.get(Confirmation, code)

    def consented(self, user_id: str, subject: str) -> bool:
        """Whether `user_id` said yes to `subject` before."""
        query = select(Confirmation.code).where(
            Confirmation.user_id == user_id,
            Confirmation.subject == subject,
            col(Confirmation.status).in_(SAID_YES),
        )
        with eng.reading(self.engine) as session:
            return session.exec(query.limit(1)).first() is not None

    def decide(self, code: str, user_id: str, yes: bool, now: datetime | None = None) -> bool:
        """`user_id`'s answer to an open question: True if this answer decided it (not
        theirs, decided already or expired: False, nothing changes)."""
        now = now or utcnow()

        def work(session: Session) -> bool:
            row = session.get(Confirmation, code)
            if row is None or row.user_id != user_id:
                return False
            status = "declined" if not yes else "ready" if row.kind == "message" else "done"
            values: dict[str, object] = {"status": status, "decided_at": now}
            if status == "ready":
                values["expires_at"] = now + TTL  # an hour to be delivered
            moved = session.execute(
                update(Confirmation)
                .where(
                    col(Confirmation.code) == code,
                    col(Confirmation.status) == "asked",
                    col(Confirmation.expires_at) > now,
                )
                .values(**values)
            )
            return bool(getattr(moved, "rowcount", 0))

        return eng.with_retry(self.engine, work, self.patience, keys=())

    def claim(self, code: str, by: str, now: datetime | None = None) -> Confirmation | None:
        """A ready message taken for sending by `by`; None when it is not ready (sent,
        being sent by another process, expired)."""
        now = now or utcnow()

        def work(session: Session) -> Confirmation | None:
            moved = session.execute(
                update(Confirmation)
                .where(
                    col(Confirmation.code) == code,
                    col(Confirmation.status) == "ready",
                    col(Confirmation.expires_at) > now,
                )
                .values(status="sending", claimed_by=by)
            )
            if not getattr(moved, "rowcount", 0):
                return None
            return session.get(Confirmation, code)

        return eng.with_retry(self.engine, work, self.patience, keys=())

    def finish(self, code: str, status: str, detail: str = "") -> None:
        def work(session: Session) -> None:
            session.execute(
                update(Confirmation)
                .where(col(Confirmation.code) == code)
                .values(status=status, detail=detail[:500])
            )

        eng.with_retry(self.engine, work, self.patience, keys=())

    def ready(self, platforms: Sequence[str], now: datetime | None = None) -> list[str]:
        """The codes of messages waiting to be sent on `platforms`, oldest first."""
        if not platforms:
            return []
        query = (
            select(Confirmation.code)
            .where(
                Confirmation.status == "ready",
                col(Confirmation.platform).in_(platforms),
                col(Confirmation.expires_at) > (now or utcnow()),
            )
            .order_by(col(Confirmation.created_at))
            .limit(100)
        )
        with eng.reading(self.engine) as session:
            return list(session.exec(query))

    def expire(self, now: datetime | None = None) -> tuple[int, int]:
        """Questions nobody answered and messages nobody could deliver in time: expired;
        a message still being sent when its hour is over (the process sending it stopped
        mid-send): unknown, never sent again. How many of each."""
        now = now or utcnow()

        def work(session: Session) -> tuple[int, int]:
            moved = session.execute(
                update(Confirmation)
                .where(
                    col(Confirmation.status).in_(("asked", "ready")),
                    col(Confirmation.expires_at) <= now,
                )
                .values(status="expired")
            )
            stuck = session.execute(
                update(Confirmation)
                .where(col(Confirmation.status) == "sending", col(Confirmation.expires_at) <= now)
                .values(status="unknown", detail=STOPPED_MID_SEND)
            )
            return int(getattr(moved, "rowcount", 0)), int(getattr(stuck, "rowcount", 0))

        return eng.with_retry(self.engine, work, self.patience, keys=())

    def of_user(self, user_id: str, limit: int = 50) -> list[Confirmation]:
        query = (
            select(Confirmation)
            .where(Confirmation.user_id == user_id)
            .order_by(col(Confirmation.created_at).desc())
            .limit(limit)
        )
        with eng.reading(self.engine) as session:
            return list(session.exec(query))


__all__ = ["SAID_YES", "STOPPED_MID_SEND", "TTL", "ConfirmationsDB"]
