"""The web dashboard's rows in state.db: logins, one-time login links, the audit log.

Tokens are random (`secrets`), handed to the browser once and stored only as their
SHA-256: whoever reads state.db (a backup, a copy) cannot log in with what it holds. A
link is used at most once (the row is marked in the statement that accepts it); a login
ends at its expiry or at logout, and every login of a person ends when they lose the
right to one (`end_all`).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state.models import AuditEntry, DashboardLink, DashboardSession, as_utc, utcnow

T = TypeVar("T")
TOKEN_BYTES = 32
AUDIT_DETAIL_CHARS = 500  # an entry names what changed; the change itself is elsewhere


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Login:
    user_id: str
    expires_at: datetime


class DashboardDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    def _write(self, work: Callable[[Session], T]) -> T:
        """Every write here is a new row or one statement whose WHERE says what it
        changes (a login ended, a link used once): the rows' own locks are enough."""
        return eng.with_retry(self.engine, work, self.patience, keys=())

    # -- logins --------------------------------------------------------------------------

    def start_login(self, user_id: str, ttl: timedelta) -> str:
        """A new login for `user_id`: the token for the cookie."""
        return self._new_token(DashboardSession, user_id, ttl)

    def login(self, token: str) -> Login | None:
        """The live login `token` names, None when unknown, ended or expired."""
        with eng.reading(self.engine) as session:
            row = session.get(DashboardSession, token_hash(token))
        if row is None or row.ended_at is not None or as_utc(row.expires_at) <= utcnow():
            return None
        return Login(row.user_id, as_utc(row.expires_at))

    def end_login(self, token: str) -> None:
        self._end(col(DashboardSession.token_hash) == token_hash(token))

    def end_all(self, user_id: str) -> None:
        """Every login of `user_id` ends (their role or access changed)."""
        self._end(col(DashboardSession.user_id) == user_id)

    def _end(self, which: Any) -> None:
        def work(session: Session) -> None:
            session.execute(
                update(DashboardSession)
                .where(which, col(DashboardSession.ended_at).is_(None))
                .values(ended_at=utcnow())
            )

        self._write(work)

    # -- one-time links ------------------------------------------------------------------

    def create_link(self, user_id: str, ttl: timedelta) -> str:
        return self._new_token(DashboardLink, user_id, ttl)

    def _new_token(
        self, table: type[DashboardSession | DashboardLink], user_id: str, ttl: timedelta
    ) -> str:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        now = utcnow()
        row = table(
            token_hash=token_hash(token), user_id=user_id, created_at=now, expires_at=now + ttl
        )

        def work(session: Session) -> None:
            session.add(row)

        self._write(work)
        return token

    def use_link(self, token: str) -> str | None:
        """The user a live, unused link belongs to, marking it used (once, even with two
        browsers racing for it); None otherwise."""
        now = utcnow()

        def work(session: Session) -> str | None:
            found = session.execute(
                update(DashboardLink)
                .where(
                    col(DashboardLink.token_hash) == token_hash(token),
                    col(DashboardLink.used_at).is_(None),
                    col(DashboardLink.expires_at) > now,
                )
                .values(used_at=now)
                .returning(col(DashboardLink.user_id))
            ).first()
            return None if found is None else str(found[0])

        return self._write(work)

    def prune(self, older_than: timedelta = timedelta(days=7)) -> int:
        """Drop logins and links that ended or expired before `older_than` ago."""
        cutoff = utcnow() - older_than

        def work(session: Session) -> int:
            gone = 0
            for table in (DashboardSession, DashboardLink):
                result = session.execute(delete(table).where(col(table.expires_at) < cutoff))
                gone += int(getattr(result, "rowcount", 0) or 0)
            return gone

        return self._write(work)

    # -- the audit log -------------------------------------------------------------------

    def audit(self, actor: str, action: str, subject: str = "", detail: str = "") -> None:
        row = AuditEntry(
            actor=actor, action=action, subject=subject, detail=detail[:AUDIT_DETAIL_CHARS]
        )

        def work(session: Session) -> None:
            session.add(row)

        self._write(work)

    def audit_log(self, limit: int = 50) -> list[AuditEntry]:
        with eng.reading(self.engine) as session:
            rows = session.exec(
                select(AuditEntry).order_by(col(AuditEntry.id).desc()).limit(limit)
            ).all()
        return list(rows)


__all__ = ["DashboardDB", "Login", "token_hash"]
