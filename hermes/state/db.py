"""SessionDB: the repository over state.db. Every query a caller needs is a method here;
every method that reads conversation data is scoped to one user."""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, delete, func, insert, or_, update
from sqlmodel import Session, col, select

from hermes.identity import new_user_id, validate_user_id
from hermes.state import engine as eng
from hermes.state.models import (
    ChatSession,
    ConsolidationState,
    Delivery,
    Identity,
    JobRun,
    MemoryEvent,
    MemoryVersion,
    Message,
    SystemPrompt,
    User,
    utcnow,
)
from hermes.state.search import MessageHit, SearchScope, search_messages

STATE_DB_FILENAME = "state.db"
IDENTITY_TOUCH_INTERVAL = timedelta(minutes=10)  # how stale identities.last_seen may get
TITLE_CHARS = 60


def new_session_id() -> str:
    return "s_" + secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class NewMessage:
    """One message to store, in OpenAI chat shape."""

    role: str
    content: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    platform_message_id: str | None = None
    token_count: int = 0
    created_at: datetime | None = None


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


class SessionDB:
    def __init__(self, path: Path, patience: float = eng.DEFAULT_PATIENCE_S) -> None:
        self.path = path
        self.patience = patience
        self.engine = eng.open_engine(path)
        self.upgraded_from = eng.migrate(self.engine, patience)

    @classmethod
    def open(cls, home: Path) -> SessionDB:
        return cls(home / STATE_DB_FILENAME)

    def close(self) -> None:
        self.engine.dispose()

    # -- users and identities ------------------------------------------------------

    def ensure_user(self, user_id: str, role: str = "user", display_name: str = "") -> User:
        validate_user_id(user_id)

        def work(session: Session) -> User:
            user = session.get(User, user_id)
            if user is None:
                user = User(id=user_id, role=role, display_name=display_name)
                session.add(user)
            return user

        return eng.with_retry(self.engine, work, self.patience)

    def get_user(self, user_id: str) -> User | None:
        with eng.reading(self.engine) as session:
            return session.get(User, user_id)

    def user_for_identity(
        self, platform: str, platform_user_id: str, display_name: str = ""
    ) -> str:
        """Our user id for a platform identity; a new identity becomes a user of its own."""
        with eng.reading(self.engine) as reader:  # the hot path: a known, recently seen identity
            known = reader.exec(
                select(Identity).where(
                    Identity.platform == platform, Identity.platform_user_id == platform_user_id
                )
            ).first()
        if known is not None and utcnow() - known.last_seen < IDENTITY_TOUCH_INTERVAL:
            return known.user_id

        def work(session: Session) -> str:
            row = session.exec(
                select(Identity).where(
                    Identity.platform == platform, Identity.platform_user_id == platform_user_id
                )
            ).first()
            if row is not None:
                row.last_seen = utcnow()
                if display_name:
                    row.display_name = display_name
                session.add(row)
                return row.user_id
            user = User(id=new_user_id(), display_name=display_name)
            session.add(user)
            session.flush()
            session.add(
                Identity(
                    platform=platform,
                    platform_user_id=platform_user_id,
                    user_id=user.id,
                    display_name=display_name,
                )
            )
            return user.id

        return eng.with_retry(self.engine, work, self.patience)

    def record_delivery(
        self,
        message_id: int | None,
        platform: str,
        chat_id: str,
        *,
        ok: bool,
        attempts: int,
        error: str | None = None,
    ) -> None:
        def work(session: Session) -> None:
            session.add(
                Delivery(
                    message_id=message_id,
                    platform=platform,
                    chat_id=chat_id,
                    status="sent" if ok else "failed",
                    attempts=attempts,
                    error=error,
                )
            )

        eng.with_retry(self.engine, work, self.patience)

    def failed_deliveries(self, platform: str | None = None) -> list[Delivery]:
        with eng.reading(self.engine) as session:
            query = select(Delivery).where(Delivery.status == "failed")
            if platform:
                query = query.where(Delivery.platform == platform)
            return list(session.exec(query.order_by(col(Delivery.id))))

    def last_assistant_message_id(self, session_id: str) -> int | None:
        with eng.reading(self.engine) as session:
            query = (
                select(Message.id)
                .where(Message.session_id == session_id, Message.role == "assistant")
                .order_by(col(Message.id).desc())
                .limit(1)
            )
            return session.exec(query).first()

    def identities_of(self, user_id: str) -> list[Identity]:
        with eng.reading(self.engine) as session:
            rows = session.exec(select(Identity).where(Identity.user_id == user_id))
            return list(rows)

    # -- sessions --------------------------------------------------------------------

    def start_session(
        self,
        user_id: str,
        platform: str,
        session_key: str,
        *,
        session_id: str | None = None,
        chat_type: str = "dm",
        chat_id: str = "",
        thread_id: str | None = None,
        shared: bool = False,
        parent_session_id: str | None = None,
        system_prompt: str | None = None,
        started_at: datetime | None = None,
    ) -> ChatSession:
        now = started_at or utcnow()
        row = ChatSession(
            id=session_id or new_session_id(),
            session_key=session_key,
            user_id=validate_user_id(user_id),
            platform=platform,
            chat_type=chat_type,
            chat_id=chat_id,
            thread_id=thread_id,
            shared=shared,
            parent_session_id=parent_session_id,
            started_at=now,
            last_active_at=now,
        )

        def work(session: Session) -> ChatSession:
            if system_prompt is not None:
                row.system_prompt_hash = _store_prompt(session, system_prompt)
            session.add(row)
            return row

        return eng.with_retry(self.engine, work, self.patience)

    def get_session(self, session_id: str, user_id: str) -> ChatSession | None:
        """The session if it belongs to `user_id`; another user's id gives None."""
        with eng.reading(self.engine) as session:
            row = session.get(ChatSession, session_id)
            return row if row is not None and row.user_id == user_id else None

    def latest_session(self, user_id: str) -> ChatSession | None:
        with eng.reading(self.engine) as session:
            query = (
                select(ChatSession)
                .where(ChatSession.user_id == user_id)
                .order_by(col(ChatSession.last_active_at).desc(), col(ChatSession.id).desc())
                .limit(1)
            )
            return session.exec(query).first()

    def session_for_key(
        self, user_id: str, session_key: str
    ) -> tuple[ChatSession | None, ChatSession | None]:
        """(the open session of this key, the latest ended one) for one user."""
        with eng.reading(self.engine) as session:
            query = (
                select(ChatSession)
                .where(ChatSession.user_id == user_id, ChatSession.session_key == session_key)
                .order_by(col(ChatSession.last_active_at).desc())
                .limit(20)
            )
            rows = list(session.exec(query))
        open_ = next((r for r in rows if r.ended_at is None), None)
        ended = next((r for r in rows if r.ended_at is not None), None)
        return open_, ended

    def list_sessions(
        self,
        user_id: str,
        platform: str | None = None,
        limit: int = 20,
        chat_id: str | None = None,
    ) -> list[ChatSession]:
        with eng.reading(self.engine) as session:
            query = select(ChatSession).where(ChatSession.user_id == user_id)
            if platform:
                query = query.where(ChatSession.platform == platform)
            if chat_id is not None:
                query = query.where(ChatSession.chat_id == chat_id)
            query = query.order_by(col(ChatSession.last_active_at).desc()).limit(limit)
            return list(session.exec(query))

    def end_session(self, session_id: str, reason: str) -> None:
        def work(session: Session) -> None:
            session.execute(
                update(ChatSession)
                .where(col(ChatSession.id) == session_id, col(ChatSession.ended_at).is_(None))
                .values(ended_at=utcnow(), end_reason=reason)
            )

        eng.with_retry(self.engine, work, self.patience)

    def system_prompt(self, prompt_hash: str) -> str | None:
        with eng.reading(self.engine) as session:
            row = session.get(SystemPrompt, prompt_hash)
            return row.text if row else None

    # -- messages --------------------------------------------------------------------

    def add_messages(
        self,
        session_id: str,
        messages: Sequence[NewMessage],
        usage: tuple[int, int] | None = None,
    ) -> list[int | None]:
        """Store messages in order; a redelivered platform message id gives None.

        `usage` adds (prompt, completion) tokens of the model call that produced them.
        """

        def work(raw: sqlite3.Connection) -> list[int | None]:
            # the hot path of every turn: plain SQL on the pooled sqlite3 connection
            # (building SQLAlchemy statements cost more than SQLite's work here)
            chat = raw.execute(_SESSION_ROW, (session_id,)).fetchone()
            if chat is None:
                raise eng.StateDBError(f"no session {session_id!r}")
            ids = [_insert_message(raw, session_id, chat, message) for message in messages]
            stored = sum(1 for i in ids if i is not None)
            last = max((m.created_at for m in messages if m.created_at), default=None)
            first_user = next((m.content for m in messages if m.role == "user" and m.content), "")
            prompt, completion = usage or (0, 0)
            if stored or usage:
                raw.execute(
                    _TOUCH,
                    (
                        stored,
                        _sql_time(last or utcnow()) if stored else None,
                        _title(first_user) if stored and first_user else "",
                        prompt,
                        completion,
                        session_id,
                    ),
                )
            return ids

        return eng.with_raw_retry(self.engine, work, self.patience)

    def add_message(self, session_id: str, message: NewMessage) -> int | None:
        return self.add_messages(session_id, [message])[0]

    def messages(self, session_id: str, user_id: str) -> list[Message]:
        if self.get_session(session_id, user_id) is None:
            return []
        with eng.reading(self.engine) as session:
            query = (
                select(Message).where(Message.session_id == session_id).order_by(col(Message.id))
            )
            return list(session.exec(query))

    def count_messages(self) -> int:
        with eng.reading(self.engine) as session:
            return int(session.exec(select(func.count()).select_from(Message)).one())

    # -- search ----------------------------------------------------------------------

    def search(self, scope: SearchScope, query: str, limit: int = 50) -> list[MessageHit]:
        with eng.reading(self.engine) as session:
            return search_messages(session.connection(), scope, query, limit)

    # -- memory provenance -----------------------------------------------------------

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

    def record_job_run(self, job_id: str, ok: bool, summary: str) -> None:
        def work(session: Session) -> None:
            session.merge(JobRun(job_id=job_id, last_run_at=utcnow(), ok=ok, summary=summary[:500]))

        eng.with_retry(self.engine, work, self.patience)

    def job_runs(self) -> dict[str, JobRun]:
        with eng.reading(self.engine) as session:
            return {row.job_id: row for row in session.exec(select(JobRun))}

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

    def message(self, message_id: int, user_id: str) -> Message | None:
        with eng.reading(self.engine) as session:
            row = session.get(Message, message_id)
            return row if row is not None and row.user_id == user_id else None

    # -- maintenance -----------------------------------------------------------------

    def prune(self, older_than_days: int, dry_run: bool, user_id: str | None = None) -> int:
        """Delete ended sessions last active more than `older_than_days` ago."""
        cutoff = utcnow() - timedelta(days=older_than_days)
        condition = [col(ChatSession.last_active_at) < cutoff]
        if user_id:
            condition.append(col(ChatSession.user_id) == user_id)

        def work(session: Session) -> int:
            ids = list(session.exec(select(ChatSession.id).where(*condition)))
            if not dry_run and ids:
                session.execute(delete(Message).where(col(Message.session_id).in_(ids)))
                session.execute(delete(ChatSession).where(col(ChatSession.id).in_(ids)))
            return len(ids)

        return eng.with_retry(self.engine, work, self.patience)

    def idle_sessions(self, idle_for: timedelta) -> list[ChatSession]:
        """Open sessions without a message for longer than `idle_for` (all users)."""
        cutoff = utcnow() - idle_for
        with eng.reading(self.engine) as session:
            query = select(ChatSession).where(
                col(ChatSession.ended_at).is_(None), col(ChatSession.last_active_at) < cutoff
            )
            return list(session.exec(query))

    def maintenance(self) -> str:
        """Checkpoint the WAL and merge the FTS indexes' segments."""

        def work(session: Session) -> None:
            conn = session.connection()
            for table in ("messages_fts", "messages_tri"):
                conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES ('optimize')")

        eng.with_retry(self.engine, work, self.patience)
        with self.engine.connect() as conn:
            busy, log, done = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
        return f"fts optimized; wal checkpoint busy={busy} frames={log}/{done}"

    def run_ddl(self, create: Callable[[Connection], None]) -> None:
        """Run schema statements of a library sharing this file, under the write lock."""
        eng.with_retry(self.engine, lambda session: create(session.connection()), self.patience)

    def integrity_check(self) -> str:
        with eng.reading(self.engine) as session:
            return str(session.connection().exec_driver_sql("PRAGMA integrity_check").scalar_one())

    def bulk_insert_messages(self, rows: Iterable[dict[str, Any]]) -> None:
        """Fast path for imports and benchmarks: rows already carry session/user/platform."""
        batch = list(rows)

        def work(session: Session) -> None:
            session.execute(insert(Message), batch)

        eng.with_retry(self.engine, work, self.patience)


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


def _store_prompt(session: Session, text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if session.get(SystemPrompt, digest) is None:
        session.add(SystemPrompt(hash=digest, text=text))
        session.flush()
    return digest


_ANY_NOTICE = (
    "SELECT 1 FROM consolidation_state WHERE user_id = ? AND notice_pending IS NOT NULL LIMIT 1"
)
_SESSION_ROW = "SELECT user_id, platform FROM sessions WHERE id = ?"
_INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, user_id, platform, role, content, tool_calls, "
    "tool_call_id, tool_name, platform_message_id, token_count, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
# a turn's messages: count them, move last_active_at forward, title an untitled session
# after its first user message, add the model call's token usage
_TOUCH = (
    "UPDATE sessions SET message_count = message_count + ?1, "
    "last_active_at = CASE WHEN ?2 IS NULL THEN last_active_at "
    "ELSE max(last_active_at, ?2) END, "
    "title = CASE WHEN title = '' AND ?3 <> '' THEN ?3 ELSE title END, "
    "prompt_tokens = prompt_tokens + ?4, completion_tokens = completion_tokens + ?5 "
    "WHERE id = ?6"
)


def _sql_time(moment: datetime) -> str:
    """The text SQLAlchemy stores for a UTC datetime (so both sort and read alike)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _insert_message(
    raw: sqlite3.Connection, session_id: str, chat: tuple[str, str], message: NewMessage
) -> int | None:
    """The new row's id, or None when the platform message id was stored already."""
    tool_calls = json.dumps(message.tool_calls, ensure_ascii=False) if message.tool_calls else None
    cursor = raw.execute(
        _INSERT_MESSAGE,
        (
            session_id,
            chat[0],
            chat[1],
            message.role,
            message.content,
            tool_calls,
            message.tool_call_id,
            message.tool_name,
            message.platform_message_id,
            message.token_count,
            _sql_time(message.created_at or utcnow()),
        ),
    )
    return cursor.lastrowid if cursor.rowcount == 1 else None


def _title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"
