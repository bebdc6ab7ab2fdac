"""Opening state.db: pragmas, file mode, migrations, and the write discipline.

WAL mode, `synchronous=NORMAL`, foreign keys on; the file is created 0600. Writers
take the write lock up front (`BEGIN IMMEDIATE`) and retry "database is locked" with
jittered backoff within a bounded patience; readers use deferred transactions, which
in WAL mode never block writers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DatabaseError, DBAPIError, OperationalError
from sqlalchemy.pool import ConnectionPoolEntry
from sqlmodel import Session, create_engine

from hermes import metrics
from hermes.state import cjk, postgres
from hermes.state.retry import (
    DatabaseBusyError,
    DatabaseUnavailableError,
    Patience,
    StateDBError,
    is_locked,
)
from hermes.state.schema import MIGRATIONS, SCHEMA_VERSION

logger = logging.getLogger(__name__)
T = TypeVar("T")

BUSY_TIMEOUT_MS = 2000  # SQLite's own wait, inside each attempt
DEFAULT_PATIENCE_S = 30.0  # our retries on top, in total


class Handle(Protocol):
    """What a repository needs of state.db: its engine, its file and the write patience.
    (SessionDB is one; a second backend provides the same to its repositories.)"""

    engine: Engine
    path: Path
    patience: float


def open_database(path: Path, patience: float) -> tuple[Engine, int]:
    """The engine of state.db at `path`, migrated; (engine, the version it had before).
    A file that cannot be used raises StateDBError saying why and what to do; nothing
    is written to it then. A file another process holds locked (its last connection
    checkpointing, a backup, an `sqlite3` shell inside a transaction) is waited for
    within `patience`, then DatabaseBusyError: locked is never reported as damaged."""
    backoff = Patience(
        patience,
        busy=f"{path} stayed locked by another process for over {{s:g}} s"
        "; try again when it is done (is an `sqlite3` shell or a backup holding it?)",
    )
    while True:
        engine: Engine | None = None
        try:
            engine = open_engine(path)
            return engine, migrate(engine, patience)
        except StateDBError:
            _dispose(engine)
            raise
        except (DatabaseError, sqlite3.DatabaseError) as exc:
            _dispose(engine)
            if not is_locked(exc):
                raise StateDBError(explain(path, exc)) from None
            backoff.wait(exc)
        except OSError as exc:
            _dispose(engine)
            raise StateDBError(
                f"cannot use {path}: {exc.strerror or exc}. Check that its folder exists and "
                "is writable by this user (HERMES_HOME selects it)."
            ) from None


def _dispose(engine: Engine | None) -> None:
    if engine is not None:
        engine.dispose()  # the pool's connections closed now, not by the collector


def explain(path: Path, exc: BaseException) -> str:
    """One clear sentence for an SQLite failure on state.db, with what to do."""
    detail = str(getattr(exc, "orig", None) or exc).strip()
    lowered = detail.lower()
    if "disk is full" in lowered or "disk i/o" in lowered:
        return f"{path}: the disk is full or failing ({detail}). Free space and try again."
    if is_locked(exc):
        return (
            f"{path} is locked by another process ({detail}); nothing was changed. Try again "
            "when it is done (is an `sqlite3` shell or a backup holding it?)."
        )
    if "readonly" in lowered or "unable to open" in lowered or "read-only" in lowered:
        return (
            f"cannot write {path} ({detail}). Check that it and its folder are writable by "
            "this user (HERMES_HOME selects the folder)."
        )
    return (
        f"{path} is damaged or is not a Hermes database ({detail}). Nothing was changed. "
        f"Restore it from a backup, or recover what SQLite can still read: "
        f"`sqlite3 {path} .recover | sqlite3 recovered.db` and put recovered.db in its "
        "place; or move the file aside to start with an empty history."
    )


def is_storage_failure(exc: BaseException) -> bool:
    """An SQLite error of the storage under state.db (full, failing or read-only), met
    mid-command: explained as at open, never shown as a traceback."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).lower()
    return isinstance(cause, sqlite3.OperationalError) and any(
        words in text for words in ("disk is full", "disk i/o", "readonly", "read-only")
    )


def is_server_lost(exc: BaseException) -> bool:
    """The database server stopped answering mid-work (PostgreSQL stopped or restarted,
    the network between gone): the connection was lost or refused, or the server is
    shutting down (SQLSTATE classes 08 and 57P). A collision is not (retried apart)."""
    cause = getattr(exc, "orig", None) or exc
    if getattr(exc, "connection_invalidated", False):
        return True
    driver = any(
        kind.__module__.startswith("psycopg")
        and kind.__name__ in ("OperationalError", "InterfaceError")
        for kind in type(cause).__mro__
    )
    state = getattr(cause, "sqlstate", None)
    return driver and (state is None or str(state).startswith(("08", "57P")))


def storage_problem(exc: BaseException) -> str | None:
    """What is wrong with the storage under a failed piece of work, in a line (state.db
    full, read-only, failing, locked past the patience, the server gone), or None when
    the failure is something else (a bug: its traceback is logged)."""
    if isinstance(exc, StateDBError):
        return str(exc)
    if is_storage_failure(exc):
        return "state.db could not be written: " + str(getattr(exc, "orig", None) or exc)
    if is_server_lost(exc):
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
        return f"the database server did not answer ({detail})"
    return None


def is_damage(exc: BaseException) -> bool:
    """An SQLite error that means the file is damaged (not busy, not full)."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).lower()
    return isinstance(cause, sqlite3.DatabaseError) and (
        "malformed" in text or "not a database" in text or "corrupt" in text
    )


def stored_version(path: Path) -> int | None:
    """The schema version in the file, read without opening it for writing (None when it
    cannot be read): what `hermes doctor` reports before deciding to open it."""
    try:
        raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return int(raw.execute("PRAGMA user_version").fetchone()[0])
        finally:
            raw.close()
    except sqlite3.Error:
        return None


def snapshot_file(source: Path, target: Path) -> bool:
    """A consistent copy of another SQLite file (a memory provider's own database) with
    SQLite's online backup API, WAL included; False when `source` is not SQLite."""
    with source.open("rb") as handle:
        if handle.read(16) != b"SQLite format 3\x00":
            return False
    raw = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        copy = sqlite3.connect(target)
        try:
            raw.backup(copy, pages=1024)
            copy.execute("PRAGMA journal_mode=DELETE")
        finally:
            copy.close()
    finally:
        raw.close()
    return True


def check_file(path: Path, *, tables: tuple[str, ...] = ()) -> str | None:
    """Why the SQLite file `path` cannot be used ('' never; None when it can): it does
    not open, fails quick_check, or lacks one of `tables`. Opened read-only."""
    try:
        raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            found = raw.execute("PRAGMA quick_check").fetchone()[0]
            names = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
        finally:
            raw.close()
    except sqlite3.DatabaseError as exc:
        return f"not a usable database ({exc})"
    if found != "ok":
        return f"damaged ({found})"
    missing = [name for name in tables if name not in names]
    return f"not the expected database (no {missing[0]} table)" if missing else None


def open_engine(path: Path) -> Engine:
    _create_private(path)
    engine = create_engine(
        f"sqlite:///{path}",
        connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
    )
    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "begin", _on_begin)
    return engine


def _create_private(path: Path) -> None:
    """Create the database file owner-only, if it is missing.

    An existing file is never opened here: closing any descriptor of a file drops every
    POSIX lock this process holds on it, including SQLite's own (another engine in this
    process, the gateway's, would lose its shared lock; a CLI process closing its last
    connection could then checkpoint and remove the WAL under it)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        with contextlib.suppress(FileExistsError):  # another process created it first
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists() and side.stat().st_mode & 0o077:
            side.chmod(0o600)


def _on_connect(dbapi_conn: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (see _on_begin)
    old_umask = os.umask(0o077)  # the -wal and -shm files are created owner-only too
    try:
        for pragma in (
            f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
            "PRAGMA journal_mode=WAL",
            "PRAGMA synchronous=NORMAL",
            "PRAGMA foreign_keys=ON",
        ):
            dbapi_conn.execute(pragma)
    finally:
        os.umask(old_umask)
    # the CJK index's triggers call it (hermes/state/schema.py, v9): every connection that
    # writes messages must have it, so every connection gets it here
    dbapi_conn.create_function("hermes_cjk", 2, cjk.index_terms, deterministic=True)


def _on_begin(conn: Any) -> None:
    mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
    started = time.perf_counter()
    conn.exec_driver_sql(f"BEGIN {mode}")
    if mode == "IMMEDIATE":  # the write lock, waited for up to the busy timeout
        metrics.DB_LOCK_WAIT_SECONDS.labels("write").observe(time.perf_counter() - started)


def _postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


Keys = Sequence[str]
"""What a write locks on PostgreSQL (SQLite has one writer at a time whatever it says):
the keys of what it reads and changes ("user:u_1", "memory:u_1", "reminder:R1"), each
locked for the transaction, so writes of other keys go on beside it; () for a write of
new rows only, or of single rows whose own row lock is enough (an UPDATE re-checks its
WHERE after waiting for another writer of the row). No write locks the whole database
(hermes/state/postgres.py `take_locks`)."""


@dataclass
class _Held:
    """The write transaction that `in_one_transaction` holds in this thread (or task):
    repository calls on its engine join it instead of starting their own; the keys it
    holds grow with what they ask for."""

    engine: Engine
    conn: Connection
    keys: set[str]


_JOINED: ContextVar[_Held | None] = ContextVar("joined", default=None)


def _joined(engine: Engine, keys: Keys = ()) -> Connection | None:
    """The held transaction on `engine`, if any, with `keys` taken in it too when it did
    not hold them yet."""
    held = _JOINED.get()
    if held is None or held.engine is not engine:
        return None
    if _postgres(engine) and (missing := set(keys) - held.keys):
        postgres.take_locks(held.conn, sorted(missing))
        held.keys |= missing
    return held.conn


def lock_keys(session: Session, keys: Keys) -> None:
    """Inside a write's `work`: lock `keys` too, for what it found it must lock (the
    person a row belongs to, read first: read, lock, then read again what the lock now
    guards). On SQLite the transaction already holds the one write lock."""
    if keys and session.get_bind().dialect.name == "postgresql":
        postgres.take_locks(session.connection(), keys)


def unavailable(exc: DBAPIError) -> StateDBError:
    """A driver's error (the server gone, a disk full) as one clear sentence."""
    detail = str(exc.orig or exc).strip().splitlines()[0]
    return StateDBError(f"the database could not be used ({detail})")


@contextmanager
def explained(engine: Engine) -> Iterator[None]:
    """Outside a held transaction, a driver's error raised inside is StateDBError
    (inside one it stays as it is: the holder retries or rolls back)."""
    held = _JOINED.get()
    if held is not None and held.engine is engine:  # (asks for no lock: only whether)
        yield
        return
    try:
        yield
    except DBAPIError as exc:
        raise unavailable(exc) from exc


def in_one_transaction(engine: Engine, work: Callable[[], T], patience: float, *, keys: Keys) -> T:
    """Run `work` in one write transaction (`keys` taken first, as by
    `with_retry`) that every repository call it makes on this engine joins: what they
    write commits together or not at all. The whole of `work` is retried while the
    database is locked (or, on PostgreSQL, while it collides), so it must be safe to run
    again after a rollback. Inside another such transaction, `work` simply joins it."""
    if _joined(engine, keys) is not None:
        return work()
    if _postgres(engine):
        connectable, backoff = engine, postgres.write_patience(patience)
    else:
        connectable, backoff = engine.execution_options(sqlite_begin="IMMEDIATE"), None
    backoff = backoff or Patience(patience)
    while True:
        try:
            with connectable.connect() as conn, conn.begin():
                if _postgres(engine):
                    postgres.take_locks(conn, keys)
                token = _JOINED.set(_Held(engine, conn, set(keys)))
                try:
                    return work()
                finally:
                    _JOINED.reset(token)
        except (DBAPIError, sqlite3.OperationalError) as exc:
            backoff.wait(exc)


@contextmanager
def _joined_session(conn: Connection) -> Iterator[Session]:
    """An ORM session inside the held transaction: it flushes, the holder commits."""
    with Session(bind=conn, expire_on_commit=False) as session:
        yield session
        session.flush()


def with_retry(engine: Engine, work: Callable[[Session], T], patience: float, *, keys: Keys) -> T:
    """Run `work` in a BEGIN IMMEDIATE transaction, retrying while the database is locked
    (on PostgreSQL: READ COMMITTED under `keys`' locks, retried while it collides with
    other writers)."""
    if (held := _joined(engine, keys)) is not None:
        with _joined_session(held) as session:
            return work(session)
    if _postgres(engine):
        return postgres.with_retry(engine, work, patience, keys)
    writer = engine.execution_options(sqlite_begin="IMMEDIATE")
    backoff = Patience(patience)
    while True:
        try:
            with Session(writer, expire_on_commit=False) as session:
                result = work(session)
                session.commit()
                return result
        except OperationalError as exc:
            backoff.wait(exc)


def sql_time(moment: datetime) -> str:
    """The text SQLAlchemy stores for a UTC datetime (so raw SQL rows sort and read alike)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


class RawConnection(Protocol):
    """What a hot path's `work` may do: sqlite3's `execute`/`executemany` with `?`
    placeholders (on PostgreSQL the same calls, hermes/state/postgres.py `Raw`). An
    insert that needs its new id says `RETURNING id`."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Any, /) -> Any: ...


def with_raw_retry(
    engine: Engine,
    work: Callable[[RawConnection], T],
    patience: float,
    *,
    begin: str = "IMMEDIATE",
    keys: Keys = (),
) -> T:
    """`with_retry` for the hot path: `work` gets the pooled sqlite3 connection itself,
    inside BEGIN IMMEDIATE ... COMMIT, with no ORM session around it. With
    begin="DEFERRED", a read of one consistent snapshot (what every memory write asks
    before it writes: a third of the cost of a SQLAlchemy connection). With
    begin="APPEND", a write each of whose statements is safe beside others (inserts that
    settle on their keys, counters updated in place): on SQLite the same as IMMEDIATE, on
    PostgreSQL READ COMMITTED, so concurrent appenders never retry each other. With
    begin="SINGLE", an append whose `work` is one statement: on PostgreSQL that statement
    is its transaction (autocommit: one round trip where BEGIN, it and COMMIT are three).
    `keys`: what an IMMEDIATE write locks on PostgreSQL (see `Keys`)."""
    # inside a held transaction an append or a read takes no lock; a write its keys
    if (held := _joined(engine, () if begin != "IMMEDIATE" else keys)) is not None:
        if _postgres(engine):
            return work(postgres.Raw(held))
        driver = held.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        return work(driver)
    if _postgres(engine):
        return postgres.with_raw_retry(engine, work, patience, begin, keys)
    backoff = Patience(patience)
    mode = "IMMEDIATE" if begin in ("APPEND", "SINGLE") else begin
    while True:
        try:  # a new connection (the pool's overflow) meets the lock in its pragmas
            pooled = engine.raw_connection()
        except (OperationalError, sqlite3.OperationalError) as exc:  # the latter: _on_connect
            backoff.wait(exc)
            continue
        conn = pooled.driver_connection
        assert isinstance(conn, sqlite3.Connection)
        try:
            conn.execute(f"BEGIN {mode}")
            try:
                result = work(conn)
                conn.execute("COMMIT")
                return result
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            backoff.wait(exc)
        finally:
            pooled.close()  # back to the pool


@contextmanager
def one_statement(engine: Engine) -> Iterator[Connection]:
    """A connection for a read of one statement (which needs no snapshot of its own): on
    PostgreSQL in autocommit, one round trip where BEGIN, the query and ROLLBACK are
    three; inside a held transaction, that transaction's connection."""
    if (held := _joined(engine, ())) is not None:
        yield held
        return
    if _postgres(engine):
        with postgres.autocommit(engine) as conn:
            yield conn
        return
    with engine.connect() as conn:
        yield conn


@contextmanager
def reading(engine: Engine, patience: float | None = DEFAULT_PATIENCE_S) -> Iterator[Session]:
    """A session that reads one consistent snapshot. On SQLite a lock met while
    connecting is waited for within `patience` (None: raised at once, for a caller that
    retries the whole of its work, as opening the database does)."""
    if (held := _joined(engine, ())) is not None:  # a read: no lock of its own
        with _joined_session(held) as session:
            yield session
        return
    if _postgres(engine):
        with postgres.reading(engine) as session:
            yield session
        return
    with _connected(engine, patience) as session:
        yield session


def _connected(engine: Engine, patience: float | None) -> Session:
    """A reading session with its connection in hand: a new connection's pragmas that
    meet a lock (a last connection checkpointing, an exclusive holder) are waited for,
    as a write's are, instead of failing the read."""
    backoff = Patience(patience) if patience is not None else None
    while True:
        session = Session(engine, expire_on_commit=False)
        try:
            session.connection()  # BEGIN DEFERRED: no lock is taken until the first read
            return session
        except (OperationalError, sqlite3.OperationalError) as exc:
            session.close()
            if backoff is None:
                raise
            backoff.wait(exc)


def open_server(url: str, patience: float, pool_size: int = 5) -> tuple[Engine, int]:
    """The engine of a PostgreSQL database at `url`, migrated; (engine, the version it
    had before). A server that cannot be reached or used raises StateDBError saying why."""

    engine = postgres.open_engine(url, pool_size)
    try:
        return engine, migrate(engine, patience)
    except BaseException as exc:
        engine.dispose()  # the pool's connections are closed, not left to the collector
        if isinstance(exc, (DatabaseError, OperationalError)):
            said = str(getattr(exc, "orig", None) or exc).strip()
            detail = said.splitlines()[0]
            error = DatabaseUnavailableError if postgres.not_there_yet(said) else StateDBError
            raise error(
                f"cannot use the PostgreSQL database {redact(url)}: {detail}. Check that the "
                "server runs, that database.url names it, and that the password variable "
                "(database.password_env) is set."
            ) from None
        raise


def redact(url: str) -> str:
    """`url` without its password, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"


def migrate(engine: Engine, patience: float) -> int:
    """Bring the database to SCHEMA_VERSION; returns the version it had before."""
    if _postgres(engine):
        try:
            return postgres.migrate(engine, SCHEMA_VERSION, patience)
        except postgres.SchemaTooNewError as exc:
            raise StateDBError(
                f"the database has schema version {exc.found}, newer than this Hermes "
                f"({SCHEMA_VERSION}); upgrade Hermes"
            ) from None

    def upgrade(session: Session) -> int:
        conn = session.connection()
        found = int(conn.exec_driver_sql("PRAGMA user_version").scalar_one())
        if found > SCHEMA_VERSION:
            raise StateDBError(
                f"state.db has schema version {found}, newer than this Hermes ({SCHEMA_VERSION});"
                " upgrade Hermes"
            )
        for version in range(found, SCHEMA_VERSION):
            for statement in MIGRATIONS[version]:
                conn.exec_driver_sql(statement)
        if found == 0:
            logger.info("state.db created (schema version %d)", SCHEMA_VERSION)
        elif found < SCHEMA_VERSION:
            logger.info("state.db upgraded from schema version %d to %d", found, SCHEMA_VERSION)
        if found != SCHEMA_VERSION:
            conn.exec_driver_sql(f"PRAGMA user_version={SCHEMA_VERSION}")
        return found

    # up to date: opening it writes nothing at all (a lock: open_database retries)
    with reading(engine, patience=None) as session:
        current = int(session.connection().exec_driver_sql("PRAGMA user_version").scalar_one())
    if current == SCHEMA_VERSION:
        return current
    return with_retry(engine, upgrade, patience, keys=())


def migrate_to(engine: Engine, version: int) -> None:
    """Create a database at an older schema version (for upgrade tests and tooling)."""

    def run(session: Session) -> None:
        conn = session.connection()
        for index in range(version):
            for statement in MIGRATIONS[index]:
                conn.exec_driver_sql(statement)
        conn.exec_driver_sql(f"PRAGMA user_version={version}")

    with_retry(engine, run, DEFAULT_PATIENCE_S, keys=())


__all__ = [
    "BUSY_TIMEOUT_MS",
    "DEFAULT_PATIENCE_S",
    "DatabaseBusyError",
    "Handle",
    "Patience",
    "RawConnection",
    "StateDBError",
    "check_file",
    "explain",
    "is_damage",
    "is_locked",
    "lock_keys",
    "migrate",
    "migrate_to",
    "one_statement",
    "open_database",
    "open_engine",
    "open_server",
    "reading",
    "redact",
    "snapshot_file",
    "sql_time",
    "stored_version",
    "with_raw_retry",
    "with_retry",
]
