"""Memory stores in the database (`memory.backend: database`): each person's MEMORY.md
and USER.md text, its waiting entries, and a version that every write compares and
swaps. hermes/memory/db_store.py runs a change through `change` so that the store, its
provenance and its undo history commit as one transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from hermes.state import engine as eng
from hermes.state.memory_log import memory_keys
from hermes.state.models import utcnow

T = TypeVar("T")

GATE_LOCK = 0x6D67  # "mg": a person's memory gate (hermes/memory/gate.py) on PostgreSQL


class GateBusyError(Exception):
    """The memory gate was not free within the timeout."""


@dataclass(frozen=True, slots=True)
class StoredText:
    """One store as the database holds it ('' and version 0: never written)."""

    user_id: str
    target: str
    text: str = ""
    pending: str = ""
    version: int = 0


_READ = "SELECT text, pending, version FROM memory_stores WHERE user_id = ? AND target = ?"
_ENSURE_USER = "INSERT INTO users (id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING"
_INSERT = (
    "INSERT INTO memory_stores (user_id, target, text, pending, version, updated_at) "
    "VALUES (?, ?, ?, ?, 1, ?) ON CONFLICT (user_id, target) DO NOTHING"
)
_SWAP = (
    "UPDATE memory_stores SET text = ?, pending = ?, version = version + 1, updated_at = ? "
    "WHERE user_id = ? AND target = ? AND version = ?"
)
_ALL = "SELECT user_id, target, text, pending, version FROM memory_stores ORDER BY 1, 2"
_USERS = "SELECT DISTINCT user_id FROM memory_stores WHERE text <> '' OR pending <> '' ORDER BY 1"
_ARCHIVE = (
    "INSERT INTO memory_archive (user_id, merged_into, target, text, pending, archived_at) "
    "SELECT user_id, ?, target, text, pending, ? FROM memory_stores "
    "WHERE user_id = ? AND (text <> '' OR pending <> '')"
)
_DELETE = "DELETE FROM memory_stores WHERE user_id = ?"
_CLAIM = (
    "UPDATE memory_stores SET consolidating_until = ? WHERE user_id = ? AND target = ? "
    "AND (consolidating_until IS NULL OR consolidating_until < ?)"
)
_RELEASE = "UPDATE memory_stores SET consolidating_until = NULL WHERE user_id = ? AND target = ?"


class MemoryStoresDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    @contextmanager
    def gate(self, user_ids: Sequence[str], *, exclusive: bool, timeout: float) -> Iterator[None]:
        """The memory gate of these people in the database (PostgreSQL), for gateways
        on several machines: a transaction on a connection of its own holds each
        person's advisory lock, shared or exclusive, in sorted order, until the block
        ends (a transaction-level lock: it works through connection poolers and ends
        with its holder). GateBusyError when they are not free within `timeout` s."""
        take = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        people = sorted(set(user_ids))
        calls = ", ".join(f"{take}({GATE_LOCK}, hashtext(%s))" for _ in people)
        with eng.explained(self.engine), self.engine.connect() as conn, conn.begin():
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{int(timeout * 1000)}ms'")
            try:
                conn.exec_driver_sql(f"SELECT {calls}", tuple(people))
            except Exception as exc:
                if getattr(getattr(exc, "orig", None), "sqlstate", None) == "55P03":
                    raise GateBusyError from None
                raise
            yield

    def read(self, user_id: str, target: str, *, for_update: bool = False) -> StoredText:
        """The store's text now; `for_update` inside `change`: the row locked against
        other writers until the change commits (on PostgreSQL; SQLite's transaction
        holds the whole database already)."""
        lock = for_update and self.engine.dialect.name == "postgresql"

        def work(raw: eng.RawConnection) -> Any:
            sql = _READ + (" FOR UPDATE" if lock else "")
            return raw.execute(sql, (user_id, target)).fetchone()

        with eng.explained(self.engine):
            row = eng.with_raw_retry(self.engine, work, self.patience, begin="DEFERRED")
        if row is None:
            return StoredText(user_id, target)
        return StoredText(user_id, target, str(row[0]), str(row[1]), int(row[2]))

    def change(self, user_ids: Sequence[str], work: Callable[[], T]) -> T:
        """Run `work` as one write transaction that every repository call inside it
        joins (the store, its events, its version): all of it commits, or none. On
        PostgreSQL it holds these people's memory locks (others' writes go on beside)."""
        with eng.explained(self.engine):
            keys = memory_keys(user_ids)
            return eng.in_one_transaction(self.engine, work, self.patience, keys=keys)

    def swap(self, seen: StoredText, text: str, pending: str) -> bool:
        """Write `text` and `pending` if the store is still at `seen`'s version; False
        when another write came first (nothing written)."""
        now = eng.sql_time(utcnow())

        def work(raw: eng.RawConnection) -> bool:
            if seen.version == 0:
                raw.execute(_ENSURE_USER, (seen.user_id, now))
                new = (seen.user_id, seen.target, text, pending, now)
                return int(raw.execute(_INSERT, new).rowcount) == 1
            swap = (text, pending, now, seen.user_id, seen.target, seen.version)
            return int(raw.execute(_SWAP, swap).rowcount) == 1

        keys = memory_keys([seen.user_id])
        return eng.with_raw_retry(self.engine, work, self.patience, keys=keys)

    def all(self) -> list[StoredText]:
        """Every store of everyone (export, copying to another database)."""

        def work(raw: eng.RawConnection) -> list[Any]:
            return list(raw.execute(_ALL).fetchall())

        rows = eng.with_raw_retry(self.engine, work, self.patience, begin="DEFERRED")
        return [StoredText(str(u), str(t), str(x), str(p), int(v)) for u, t, x, p, v in rows]

    def users(self) -> list[str]:
        """People with something in a store."""

        def work(raw: eng.RawConnection) -> list[Any]:
            return list(raw.execute(_USERS).fetchall())

        return [
            str(row[0])
            for row in eng.with_raw_retry(self.engine, work, self.patience, begin="DEFERRED")
        ]

    def archive(self, user_id: str, merged_into: str) -> int:
        """Keep `user_id`'s stores in the archive and remove them (a merge); how many."""
        now = eng.sql_time(utcnow())

        def work(raw: eng.RawConnection) -> int:
            kept = int(raw.execute(_ARCHIVE, (merged_into, now, user_id)).rowcount)
            raw.execute(_DELETE, (user_id,))
            return kept

        keys = memory_keys([user_id, merged_into])
        return eng.with_raw_retry(self.engine, work, self.patience, keys=keys)

    def claim(self, user_id: str, target: str, until: datetime) -> bool:
        """Claim the store for a consolidation until `until`, unless a live claim holds
        it (one run at a time, on any machine); False then, or with no such store."""
        now = utcnow()
        row = (eng.sql_time(until), user_id, target, eng.sql_time(now))

        def work(raw: eng.RawConnection) -> bool:
            return int(raw.execute(_CLAIM, row).rowcount) == 1

        with eng.explained(self.engine):  # one conditional UPDATE: the row's own lock
            return eng.with_raw_retry(self.engine, work, self.patience, keys=())

    def release(self, user_id: str, target: str) -> None:
        with eng.explained(self.engine):
            eng.with_raw_retry(
                self.engine,
                lambda raw: raw.execute(_RELEASE, (user_id, target)),
                self.patience,
                keys=(),
            )


__all__ = ["MemoryStoresDB", "StoredText"]
