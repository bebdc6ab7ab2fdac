"""A memory provider's own SQLite file in HERMES_HOME (evidence.db, holographic.db):
WAL, foreign keys, 0600, one connection per thread, writes in BEGIN IMMEDIATE (another
process waits up to BUSY_MS, it does not fail), one object per file in a process."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Self

from hermes.identity import ensure_private_dir

BUSY_MS = 10_000


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def scope_token(user_id: str) -> str:
    """The person's token in a full-text index ('u_0123…' -> 's0123…'-like)."""
    return "s" + "".join(ch for ch in user_id if ch.isalnum())


COMMON_POSTINGS = 500  # a term in more of the person's rows than this ranks nothing


def quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_query(conn: sqlite3.Connection, table: str, user_id: str, terms: Iterable[str]) -> str:
    """The FTS5 query for `terms` in the person's rows of `table`, without the terms
    found in more than COMMON_POSTINGS of them (counted up to that bound, cheaply):
    ranking their long posting lists costs the most and tells the least (a word in
    every note). When every term is that common, they are all kept."""
    wanted = [t for t in dict.fromkeys(terms) if t]
    if not wanted:
        return ""
    scope = scope_token(user_id)
    rare = [
        term
        for term in wanted
        if conn.execute(
            f"SELECT count(*) FROM (SELECT rowid FROM {table} WHERE {table} MATCH ? LIMIT ?)",
            (f"scope : {scope} AND {quote(term)}", COMMON_POSTINGS + 1),
        ).fetchone()[0]
        <= COMMON_POSTINGS
    ]
    return f"scope : {scope} AND ({' OR '.join(quote(t) for t in rare or wanted)})"


class SidecarDB:
    FILENAME: ClassVar[str]
    SCHEMA: ClassVar[list[str]]
    _open: ClassVar[dict[Path, SidecarDB]] = {}
    _open_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        ensure_private_dir(path.parent)
        with self._write() as conn:
            for statement in self.SCHEMA:
                conn.execute(statement)
        path.chmod(0o600)

    @classmethod
    def at(cls, home: Path) -> Self:
        """The store of `home` (one object per file in a process)."""
        path = home / cls.FILENAME
        with cls._open_lock:
            store = cls._open.get(path)
            if not isinstance(store, cls):
                store = cls(path)
                cls._open[path] = store
            return store

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_MS / 1000, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            self._local.conn = conn
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


__all__ = ["BUSY_MS", "SidecarDB", "match_query", "now", "scope_token"]
