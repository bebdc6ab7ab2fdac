"""A memory provider's own store: a SQLite file in HERMES_HOME (evidence.db,
holographic.db: WAL, foreign keys, 0600, one connection per thread, writes in BEGIN
IMMEDIATE, so another process waits up to BUSY_MS and does not fail, one object per
file in a process), or, when the home's state is on PostgreSQL, tables of that database
(`ServerSidecar`: their own names, created on first use; writes behind the database's
one writer lock, as state.db's own). Opening state.db on PostgreSQL registers the home
(`serve_from`), so a provider asking for its store by home gets the database's."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Self

from sqlalchemy import Engine

from hermes.identity import ensure_private_dir
from hermes.state import postgres

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
        self.where = str(path)
        self._local = threading.local()
        ensure_private_dir(path.parent)
        with self._file_write() as conn:
            for statement in self.SCHEMA:
                conn.execute(statement)
        path.chmod(0o600)

    @classmethod
    def in_home(cls, home: Path) -> Self:
        """The store of `home` (one object per file in a process)."""
        path = home / cls.FILENAME
        with cls._open_lock:
            store = cls._open.get(path)
            if not isinstance(store, cls):
                store = cls(path)
                cls._open[path] = store
            return store

    def _file_conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_MS / 1000, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={BUSY_MS}")
            self._local.conn = conn
        return conn

    @contextmanager
    def _file_write(self) -> Iterator[sqlite3.Connection]:
        conn = self._file_conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


class Tabled:
    """A store's connection whose SQL names its tables as {name}: each backend's names
    filled in (`facts` in the file, `evidence_facts` on PostgreSQL), once per text."""

    def __init__(self, raw: Any, tables: dict[str, str]) -> None:
        self.raw, self.tables = raw, tables

    def _fill(self, sql: str) -> str:
        filled = _FILLED.get((id(self.tables), sql))
        if filled is None:
            filled = _FILLED[(id(self.tables), sql)] = sql.format(**self.tables)
        return filled

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.raw.execute(self._fill(sql), params)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self.raw.executemany(self._fill(sql), rows)


_FILLED: dict[tuple[int, str], str] = {}
_SERVED: dict[Path, Engine] = {}
_SERVED_LOCK = threading.Lock()


def serve_from(home: Path, engine: Engine) -> None:
    """The providers' stores of `home` live in this PostgreSQL database."""
    with _SERVED_LOCK:
        _SERVED[home.resolve()] = engine


def server_for(home: Path) -> Engine | None:
    with _SERVED_LOCK:
        return _SERVED.get(home.resolve())


class ServerSidecar:
    """A provider's store as tables of the state database on PostgreSQL.
    `_server_conn()` and `_server_write()` give a connection whose `execute` takes the
    SQLite store's `?` SQL."""

    SERVER_SCHEMA: ClassVar[list[str]]
    _open: ClassVar[dict[tuple[type, int], Any]] = {}
    _open_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        with self._server_write(()) as conn:
            conn.execute(f"SELECT pg_advisory_xact_lock({postgres.MIGRATION_LOCK})")
            for statement in self.SERVER_SCHEMA:
                conn.execute(statement)

    @classmethod
    def on(cls, engine: Engine) -> Self:
        with cls._open_lock:
            store = cls._open.get((cls, id(engine)))
            if not isinstance(store, cls):
                store = cls._open[(cls, id(engine))] = cls(engine)
            return store

    @contextmanager
    def _server_conn(self) -> Iterator[postgres.Raw]:
        with self.engine.connect() as conn, conn.begin():
            yield postgres.Raw(conn)

    @contextmanager
    def _server_write(self, keys: Sequence[str]) -> Iterator[postgres.Raw]:
        """A write transaction holding `keys`' locks (the people whose rows it changes)."""
        with self.engine.connect() as conn, conn.begin():
            postgres.take_locks(conn, keys)
            yield postgres.Raw(conn)


__all__ = [
    "BUSY_MS",
    "ServerSidecar",
    "SidecarDB",
    "Tabled",
    "match_query",
    "now",
    "scope_token",
    "serve_from",
    "server_for",
]
