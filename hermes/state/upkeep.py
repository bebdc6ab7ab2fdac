"""Upkeep of state.db: scheduler job runs and schedules, retention pruning, WAL
checkpoint and FTS optimize, integrity checks, bulk imports."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert
from sqlalchemy.exc import DatabaseError, SQLAlchemyError
from sqlmodel import Session, col, select

from hermes.state import engine as eng
from hermes.state import postgres
from hermes.state.conversations import drop_sessions
from hermes.state.models import ChatSession, Message, utcnow


class UpkeepDB:
    """Each method does what its name says on SQLite; on PostgreSQL its counterpart in
    hermes/state/postgres.py (the server vacuums, checkpoints and checks its own pages)."""

    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience
        self._server = self.engine.dialect.name == "postgresql"

    def prune(self, older_than_days: int, dry_run: bool, user_id: str | None = None) -> int:
        """Delete ended sessions last active more than `older_than_days` ago."""
        cutoff = utcnow() - timedelta(days=older_than_days)
        condition = [col(ChatSession.last_active_at) < cutoff]
        if user_id:
            condition.append(col(ChatSession.user_id) == user_id)

        def work(session: Session) -> int:
            found = select(ChatSession.id).where(*condition)
            # on PostgreSQL their rows locked (and asked again, when a turn was storing
            # a message in one: it is kept if that made it active); no other lock
            ids = list(session.exec(found if dry_run else found.with_for_update()))
            if not dry_run and ids:
                drop_sessions(session, ids)
            return len(ids)

        return eng.with_retry(self.engine, work, self.patience, keys=())

    def index_search(self) -> int:
        """Index now what waits for PostgreSQL's search index (an upgrade, a bulk load;
        searches otherwise do it first); how many messages. SQLite's triggers keep its
        index current: 0."""
        return postgres.index_backlog(self.engine) if self._server else 0

    def maintenance(self) -> str:
        """Checkpoint the WAL and merge the FTS indexes' segments."""
        if self._server:
            return postgres.maintenance(self.engine)

        def work(session: Session) -> None:
            conn = session.connection()
            for table in ("messages_fts", "messages_cjk"):
                conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES ('optimize')")

        eng.with_retry(self.engine, work, self.patience, keys=())  # (SQLite only)
        with self.engine.connect() as conn:
            busy, log, done = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
        return f"fts optimized; wal checkpoint busy={busy} frames={log}/{done}"

    def quick_check(self) -> str:
        """'ok', or what SQLite found damaged (pages overwritten, broken indexes; a file
        too damaged to check at all says so too, never raises)."""
        if self._server:
            return self.integrity_check()
        try:
            with eng.reading(self.engine) as session:
                rows = session.connection().exec_driver_sql("PRAGMA quick_check(5)").all()
        except DatabaseError as exc:
            return str(getattr(exc, "orig", None) or exc).strip()
        return "; ".join(str(row[0]) for row in rows)

    def snapshot(self, target: Path) -> None:
        """A consistent copy of the whole database at `target` (SQLite's online backup
        API: safe while the gateway writes; the copy is one moment of the database)."""
        if self._server:
            raise eng.StateDBError(
                "a snapshot of a PostgreSQL database is taken with pg_dump, not copied as a "
                "file; hermes backup does not do that yet"
            )
        raw = self.engine.raw_connection()
        try:
            source = raw.driver_connection
            assert isinstance(source, sqlite3.Connection)
            copy = sqlite3.connect(target)
            try:
                source.backup(copy, pages=1024)  # in steps: writers wait at most one step
                copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            finally:
                copy.close()
        finally:
            raw.close()

    def server(self) -> str:
        """The engine and its version ("SQLite 3.40.1", "PostgreSQL 15.20")."""
        if self._server:
            return f"PostgreSQL {postgres.server_version(self.engine)}"
        return f"SQLite {sqlite3.sqlite_version}"

    def size_bytes(self) -> int:
        """What state.db takes: the database on the server, or the file with its WAL
        and shared-memory files."""
        if self._server:
            with self.engine.connect() as conn:
                found = conn.exec_driver_sql("SELECT pg_database_size(current_database())")
                return int(found.scalar_one())
        path = Path(str(self.engine.url.database))
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())

    def schema_version(self) -> int:
        if self._server:
            with self.engine.connect() as conn:
                return postgres.version(conn)
        with eng.reading(self.engine) as session:
            return int(session.connection().exec_driver_sql("PRAGMA user_version").scalar_one())

    def writable(self) -> bool:
        """Whether a write transaction can begin now (the disk is not read-only or full
        and no writer holds the lock for long); nothing is written."""
        try:
            if self._server:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("SELECT pg_is_in_recovery()").scalar_one()
                return True
            with self.engine.connect().execution_options(sqlite_begin="IMMEDIATE") as conn:
                conn.begin().rollback()
        except SQLAlchemyError:
            return False
        return True

    def integrity_check(self) -> str:
        if self._server:
            return postgres.check(self.engine)
        with eng.reading(self.engine) as session:
            return str(session.connection().exec_driver_sql("PRAGMA integrity_check").scalar_one())

    def bulk_insert_messages(self, rows: Iterable[dict[str, Any]]) -> None:
        """Fast path for imports and benchmarks: rows already carry session/user/platform."""
        batch = list(rows)

        def work(session: Session) -> None:
            session.execute(insert(Message), batch)

        eng.with_retry(self.engine, work, self.patience, keys=())  # new rows
