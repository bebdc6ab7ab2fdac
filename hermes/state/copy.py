"""Copying a whole SQLite state.db into an empty PostgreSQL database (`hermes db
migrate`), and proving the copy: per table, the row count and a checksum of every row
in key order, computed the same way on both sides.

Every table of state.db is copied as it is (the ids too, so provenance, replies and
vectors keep pointing at the same rows), in foreign-key order, in batches; the search
terms are then built for every message (PostgreSQL's word and CJK index) and each
table's id sequence is moved past the highest id copied. SQLite's own tables and its
FTS5 indexes are not data: they are left out.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Boolean, Connection, Engine, MetaData, Table, inspect, text
from sqlalchemy.exc import DBAPIError

from hermes.state.evidence import FileEvidenceStore, ServerEvidenceStore
from hermes.state.factstore import FileFactStore, ServerFactStore
from hermes.state.postgres import Raw

BATCH = 2000
# state.db's own indexes and SQLite's bookkeeping: rebuilt or meaningless elsewhere; and
# APScheduler's job store, which a SQLite home of schema 20 or older may still hold
# (pickled timers: each gateway makes its timers at start from `job_runs` and
# `job_schedules`, reminders from `reminders`)
_NOT_DATA = ("sqlite_", "messages_fts", "messages_cjk", "apscheduler_jobs")


class CopyError(Exception):
    """What cannot be copied (said before anything is), or the server's reason a copy
    failed part way."""


@contextmanager
def explained() -> Iterator[None]:
    """A database error during a copy, as a CopyError with the server's reason."""
    try:
        yield
    except DBAPIError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise CopyError(f"the copy failed: {reason}") from None


# what PostgreSQL keeps for itself (built during the copy, or by the schema)
_TARGET_ONLY = frozenset(
    {"hermes_schema", "change_stamps", "message_terms", "search_backlog", "media_blobs"}
)

Progress = Callable[[str, int, int], None]  # (table, rows done, rows in the table)


@dataclass(frozen=True, slots=True)
class TableCheck:
    table: str
    source_rows: int
    target_rows: int
    source_sum: str
    target_sum: str

    @property
    def ok(self) -> bool:
        return (self.source_rows, self.source_sum) == (self.target_rows, self.target_sum)


def data_tables(engine: Engine) -> list[str]:
    """The tables of `engine` that hold Hermes's data, parents before children."""
    metadata = MetaData()
    metadata.reflect(engine)
    return [
        t.name
        for t in metadata.sorted_tables
        if not t.name.startswith(_NOT_DATA) and t.name not in _TARGET_ONLY
    ]


def row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            name: int(conn.execute(text(f'SELECT count(*) FROM "{name}"')).scalar_one())
            for name in data_tables(engine)
        }


def copy_all(source: Engine, target: Engine, progress: Progress | None = None) -> None:
    """Copy every data table of `source` into `target` (whose schema exists, empty).
    CopyError, before a row moves, for a table Hermes's schema does not have."""
    names = data_tables(source)
    found = MetaData()
    found.reflect(target)
    unknown = [name for name in names if name not in found.tables]
    if unknown:
        raise CopyError(
            f"state.db holds table(s) Hermes does not know: {', '.join(unknown)} (made by "
            "another program, or by a newer Hermes?); they cannot be copied"
        )
    # the vector model last: while it is missing, the messages' trigger queues none of
    # them for embedding (the queue is copied as it was)
    names.sort(key=lambda name: name == "vector_model")
    with source.connect() as reader, target.connect() as writer:
        for name in names:
            _copy_table(reader, writer, found.tables[name], progress)
        _after_copy(writer, found)
        writer.commit()


def _copy_table(
    reader: Connection, writer: Connection, table: Table, progress: Progress | None
) -> None:
    total = int(reader.execute(text(f'SELECT count(*) FROM "{table.name}"')).scalar_one())
    flags = {c.name for c in table.columns if isinstance(c.type, Boolean)}
    done = 0
    if progress:
        progress(table.name, 0, total)
    for rows in _batches(reader, table.name, [c.name for c in table.columns]):
        for row in rows:
            for name in flags:
                if row[name] is not None:
                    row[name] = bool(row[name])
        writer.execute(table.insert(), rows)
        done += len(rows)
        if progress:
            progress(table.name, done, total)


def _batches(conn: Connection, table: str, columns: list[str]) -> Iterator[list[dict[str, Any]]]:
    listed = ", ".join(f'"{c}"' for c in columns)
    result = conn.execute(text(f'SELECT {listed} FROM "{table}" ORDER BY {_order(conn, table)}'))
    while rows := result.fetchmany(BATCH):
        yield [dict(zip(columns, row, strict=True)) for row in rows]


def _after_copy(writer: Connection, found: MetaData) -> None:
    """Each id sequence past the highest id copied (the messages' trigger has put each
    indexed message on the search backlog; `index_backlog` builds their terms)."""
    for table in found.sorted_tables:
        for column in table.primary_key.columns:
            sequence = writer.execute(
                text("SELECT pg_get_serial_sequence(:t, :c)"), {"t": table.name, "c": column.name}
            ).scalar_one()
            if sequence is not None:
                highest = f'SELECT coalesce(max("{column.name}"), 0) FROM "{table.name}"'
                top = int(writer.execute(text(highest)).scalar_one())
                if top:
                    writer.execute(text("SELECT setval(:s, :v)"), {"s": sequence, "v": top})


def copy_media_files(home: Path, target: Engine) -> tuple[int, list[str]]:
    """The bytes of every file the media rows name, from the home's media/ into the
    database; (files copied, files missing from the home)."""
    with target.connect() as conn:
        paths = [row[0] for row in conn.execute(text("SELECT DISTINCT path FROM media"))]
        copied, missing = 0, []
        for path in paths:
            try:
                data = (home / path).read_bytes()
            except FileNotFoundError:
                missing.append(path)
                continue
            conn.execute(
                text(
                    "INSERT INTO media_blobs(path, data, created_at) VALUES (:p, :d, now()) "
                    "ON CONFLICT (path) DO NOTHING"
                ),
                {"p": path, "d": data},
            )
            copied += 1
        conn.commit()
    return copied, missing


def copy_provider_stores(home: Path, target: Engine) -> list[TableCheck]:
    """Each local memory provider's SQLite file in the home (holographic.db,
    evidence.db) into its tables in the database: every row, ids kept (sequences moved
    past them), in foreign-key order, then the words index built; one check per table
    (rows, and a checksum of every row taken in any order). A provider never used has
    no file: nothing to copy."""
    pairs: list[tuple[str, Any]] = [
        (FileFactStore.FILENAME, ServerFactStore),
        (FileEvidenceStore.FILENAME, ServerEvidenceStore),
    ]
    checks = []
    for filename, server in pairs:
        path = home / filename
        if not path.exists():
            continue
        store = server.on(target)  # its tables, created on first use
        source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {
                name: (moved, [row[1] for row in source.execute(f'PRAGMA table_info("{name}")')])
                for name, moved in server.TABLES.items()
            }
            with target.begin() as conn:
                for name, (moved, columns) in tables.items():
                    listed = ", ".join(columns)
                    rows = source.execute(f"SELECT {listed} FROM {name}").fetchall()
                    marks = ", ".join("%s" for _ in columns)
                    if rows:
                        conn.exec_driver_sql(
                            f"INSERT INTO {moved} ({listed}) VALUES ({marks})", rows
                        )
                    if "id" in columns and rows and name not in ("chunks",):
                        conn.exec_driver_sql(
                            f"SELECT setval(pg_get_serial_sequence('{moved}', 'id'), "
                            f"(SELECT max(id) FROM {moved}))"
                        )
                store.rebuild_words(Raw(conn))
            with target.connect() as conn:
                for name, (moved, columns) in tables.items():
                    listed = ", ".join(columns)
                    left = source.execute(f"SELECT {listed} FROM {name}").fetchall()
                    right = conn.exec_driver_sql(f"SELECT {listed} FROM {moved}").fetchall()
                    checks.append(
                        TableCheck(
                            f"{filename}:{name}",
                            len(left),
                            len(right),
                            _rows_sum(left),
                            _rows_sum(right),
                        )
                    )
        finally:
            source.close()
    return checks


def _rows_sum(rows: Sequence[Any]) -> str:
    """A checksum of rows in any order (each row's values as both engines give them)."""
    lines = sorted(repr([_canonical(v) for v in row]) for row in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def verify(source: Engine, target: Engine) -> list[TableCheck]:
    """Each data table's rows and checksum on both sides (the source's tables)."""
    checks = []
    with source.connect() as left, target.connect() as right:
        for name in data_tables(source):
            found = inspect(source).get_columns(name)
            columns = [c["name"] for c in found]
            times = {c["name"] for c in found if _is_time(c["type"])}
            count_a, sum_a = _summary(left, name, columns, times)
            count_b, sum_b = _summary(right, name, columns, times)
            checks.append(TableCheck(name, count_a, count_b, sum_a, sum_b))
    return checks


def _is_time(kind: Any) -> bool:
    return "TIME" in str(kind).upper()


def _summary(conn: Connection, table: str, columns: list[str], times: set[str]) -> tuple[int, str]:
    digest, count = hashlib.sha256(), 0
    for rows in _batches(conn, table, columns):
        for row in rows:
            values = [_canonical(row[c], c in times) for c in columns]
            digest.update(repr(values).encode())
            count += 1
    return count, digest.hexdigest()


def _order(conn: Connection, table: str) -> str:
    keys = inspect(conn).get_pk_constraint(table).get("constrained_columns") or []
    if not keys:  # no key: every column, so both sides list the rows alike
        keys = [c["name"] for c in inspect(conn).get_columns(table)]
    return ", ".join(f'"{k}"' for k in keys)


def _canonical(value: Any, time: bool = False) -> Any:
    """A value as both engines give it back: times as UTC text (SQLite keeps them as
    text), flags as 0/1, floats rounded to what both keep, bytes as hex."""
    if time and isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        moment = value.astimezone(UTC) if value.tzinfo else value
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return value if math.isnan(value) else round(value, 6)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    return value


__all__ = [
    "TableCheck",
    "copy_all",
    "copy_media_files",
    "copy_provider_stores",
    "data_tables",
    "row_counts",
    "verify",
]
