"""Real processes sharing one state.db: no errors, no lost rows, no corruption."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from hermes.identity import new_user_id
from hermes.state.db import SessionDB
from hermes.state.search import SearchScope
from tests.harness.cli import Forked
from tests.state.db_worker import open_db

WORKER = str(Path(__file__).with_name("db_worker.py"))


@pytest.mark.slow
def test_four_writers_and_four_searchers(tmp_path: Path, database_url: str | None) -> None:
    """On PostgreSQL the writes collide as SERIALIZABLE transactions and are retried;
    the searchers index the trigger-fed backlog as they go (several at once)."""
    path = database_url or str(tmp_path / "state.db")
    db = open_db(path)
    user = db.people.ensure_user(new_user_id()).id
    seconds = "4"
    writers = [
        subprocess.Popen(
            [sys.executable, WORKER, "write", path, user, str(w), seconds],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(4)
    ]
    searchers = [
        subprocess.Popen(
            [sys.executable, WORKER, "search", path, user, seconds],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    written: dict[str, int] = {}
    for proc in writers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        session_id, count = out.split()
        written[session_id] = int(count)
    for proc in searchers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert int(out) > 0
    for session_id, count in written.items():
        messages = db.conversations.messages(session_id, user)
        assert len(messages) == count > 0  # nothing lost
        chat = db.conversations.get_session(session_id, user)
        assert chat is not None and chat.message_count == count
    assert sum(written.values()) == db.conversations.count_messages()
    hits = db.conversations.search(SearchScope(user), "writer1 comets", limit=5)
    assert hits and "writer1" in hits[0].content
    assert db.upkeep.integrity_check() == "ok"
    db.close()
    print(f"rows written: {written}")


@pytest.mark.slow
def test_sigkilled_writer_loses_no_committed_row(tmp_path: Path, database_url: str | None) -> None:
    path = database_url or str(tmp_path / "state.db")
    db = open_db(path)
    user = db.people.ensure_user(new_user_id()).id
    committed: list[int] = []
    rng = random.Random(3)
    for _ in range(12):
        with Forked(WORKER, "crash", path, user) as proc:
            committed.append(int(proc.stdout.readline()))
            time.sleep(rng.uniform(0.01, 0.15))
            proc.send_signal(signal.SIGKILL)
            committed += [int(line) for line in proc.stdout.read().split()]
        fresh = open_db(path)
        assert fresh.upkeep.integrity_check() == "ok"
        with fresh.engine.connect() as conn:
            present = {row[0] for row in conn.execute(text("SELECT id FROM messages"))}
            if fresh.backend == "sqlite":
                sql = "INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')"
                conn.execute(text(sql))
        missing = set(committed) - present
        assert not missing, f"committed rows lost after SIGKILL: {sorted(missing)[:5]}"
        fresh.close()
    assert len(committed) > 12
    db.close()


def test_a_second_engine_in_the_process_keeps_the_first_ones_view_current(
    tmp_path: Path,
) -> None:
    """Opening state.db again in one process (the scheduler's jobs do) must not drop the
    first engine's SQLite locks: a CLI process closing its last connection would then
    remove the WAL under it, and the first engine would keep reading an old snapshot."""
    first = SessionDB(tmp_path / "state.db")
    first.people.ensure_user(new_user_id())  # the engine holds a connection, and its locks
    SessionDB(tmp_path / "state.db").close()  # a job's engine, opened and closed
    for _ in range(3):  # other processes write and go away, as CLI commands do
        written = new_user_id()
        code = (
            "import sys; from pathlib import Path; from hermes.state.db import SessionDB; "
            "SessionDB(Path(sys.argv[1])).people.ensure_user(sys.argv[2])"
        )
        path = str(tmp_path / "state.db")
        subprocess.run([sys.executable, "-c", code, path, written], check=True, timeout=60)
        assert first.people.get_user(written) is not None
        first.people.ensure_user(new_user_id())  # and writing still works
    assert first.upkeep.integrity_check() == "ok"
    first.close()
