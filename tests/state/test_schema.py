"""Schema, pragmas, file mode and the upgrade path of state.db."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect
from sqlmodel import SQLModel

from hermes.identity import new_user_id
from hermes.state import engine as eng
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.schema import SCHEMA_VERSION
from hermes.state.search import SearchScope
from tests.harness.postgres import sqlite_only


def test_models_match_the_migrated_schema(db: SessionDB) -> None:
    """Column by column, and each foreign key with what a delete does to it: the models
    are the schema on PostgreSQL and must say what SQLite's migrations built."""
    found = inspect(db.engine)
    for table in SQLModel.metadata.sorted_tables:
        columns = {c["name"] for c in found.get_columns(table.name)}
        assert columns == {c.name for c in table.columns}, table.name
        keys = _foreign_keys(db, found, table.name)
        declared = {
            ((fk.parent.name,), fk.column.table.name, (fk.ondelete or "NO ACTION").upper())
            for fk in table.foreign_keys
        }
        assert keys == declared, table.name


def _foreign_keys(db: SessionDB, found: Any, table: str) -> set[tuple[Any, ...]]:
    if db.backend == "sqlite":  # SQLAlchemy's reflection misses some ON DELETE clauses
        with db.engine.connect() as conn:
            rows = conn.exec_driver_sql(f"PRAGMA foreign_key_list({table})").all()
        return {((r[3],), r[2], r[6]) for r in rows}
    return {
        (
            tuple(fk["constrained_columns"]),
            fk["referred_table"],
            str((fk.get("options") or {}).get("ondelete") or "NO ACTION").upper(),
        )
        for fk in found.get_foreign_keys(table)
    }


@sqlite_only
def test_pragmas_and_private_file(db: SessionDB) -> None:
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar_one() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar_one() == 1
        assert conn.exec_driver_sql("PRAGMA user_version").scalar_one() == SCHEMA_VERSION
    db.people.ensure_user(new_user_id())
    for suffix in ("", "-wal", "-shm"):
        path = db.path.with_name(db.path.name + suffix)
        assert path.stat().st_mode & 0o777 == 0o600, path


def test_foreign_keys_are_enforced(db: SessionDB) -> None:
    with pytest.raises(Exception, match=r"(?i)foreign key"):
        db.conversations.start_session(new_user_id(), "cli", "cli:dm")  # no such user


def test_v1_database_is_upgraded_in_place_keeping_data(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    old_engine = eng.open_engine(path)
    eng.migrate_to(old_engine, 1)  # a database as the first release left it
    old_engine.dispose()
    raw = sqlite3.connect(path)
    user = new_user_id()
    raw.execute(
        "INSERT INTO users(id, role, status, created_at)"
        " VALUES (?, 'owner', 'active', '2026-01-01')",
        (user,),
    )
    raw.execute(
        "INSERT INTO sessions(id, session_key, user_id, platform, started_at, last_active_at)"
        " VALUES ('s_0000000000000001', 'k', ?, 'cli', '2026-01-01', '2026-01-01')",
        (user,),
    )
    raw.execute(
        "INSERT INTO messages(session_id, user_id, platform, role, content, created_at) VALUES "
        "('s_0000000000000001', ?, 'cli', 'user', '오래된 메시지: 부산 여행 계획', '2026-01-01')",
        (user,),
    )
    raw.commit()
    raw.close()

    db = SessionDB(path)  # opening upgrades
    assert db.upgraded_from == 1
    assert db.conversations.get_session("s_0000000000000001", user) is not None
    hits = db.conversations.search(
        SearchScope(user), "여행 계획"
    )  # needs the v2 trigram index, backfilled
    assert [h.content for h in hits] == ["오래된 메시지: 부산 여행 계획"]
    assert db.upkeep.integrity_check() == "ok"
    db.close()
    assert SessionDB(path).upgraded_from == SCHEMA_VERSION  # idempotent


def test_a_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(eng.StateDBError, match="newer than this Hermes"):
        SessionDB(path)


def test_tool_output_is_stored_but_not_indexed(db: SessionDB, alice: str) -> None:
    chat = db.conversations.start_session(alice, "cli", "cli:dm")
    db.conversations.add_messages(
        chat.id,
        [
            NewMessage("user", "what is in the config"),
            NewMessage("tool", "zanzibar quokka tool output", tool_call_id="c1", tool_name="x"),
        ],
    )
    assert [m.role for m in db.conversations.messages(chat.id, alice)] == ["user", "tool"]
    assert db.conversations.search(SearchScope(alice), "zanzibar quokka") == []
