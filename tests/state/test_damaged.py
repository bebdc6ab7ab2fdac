"""A state.db that cannot be used gives one clear message, exit 2, and changes nothing."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.engine import BUSY_TIMEOUT_MS
from hermes.state.retry import DatabaseBusyError
from tests.harness.cli import hermes


def _healthy(home: Path) -> Path:
    db = SessionDB.open(home)
    user = db.people.ensure_user("u_00000000000000aa").id
    chat = db.conversations.start_session(user, "cli", "k")
    for n in range(400):
        db.conversations.add_message(chat.id, NewMessage("user", f"message number {n} " * 20))
    db.upkeep.maintenance()  # everything in the main file, no WAL
    db.close()
    return home / "state.db"


def _not_a_database(path: Path) -> None:
    path.write_bytes(b"this is a text file, not a database\n" * 10)


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _bad_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0:16] = b"Not SQLite fmt\x00\x00"
    path.write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "not a database": _not_a_database,
    "truncated": _truncated,
    "bad header": _bad_header,
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
@pytest.mark.parametrize("command", [["sessions", "list"], ["memory", "status"], ["users", "list"]])
def test_a_damaged_state_db_is_a_clear_error_and_is_left_alone(
    home: Path, damage: str, command: list[str]
) -> None:
    path = _healthy(home)
    DAMAGE[damage](path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result = hermes(*command)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert str(path) in result.stderr and "backup" in result.stderr
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def _overwrite_pages(path: Path) -> None:
    """Damage inside a valid file: an index page overwritten with noise."""
    raw = sqlite3.connect(path)
    page_size = raw.execute("PRAGMA page_size").fetchone()[0]
    root = raw.execute(
        "SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages'"
    ).fetchone()[0]
    raw.close()
    data = bytearray(path.read_bytes())
    start = (root - 1) * page_size
    data[start + 8 : start + page_size] = bytes((i * 37) % 251 for i in range(page_size - 8))
    path.write_bytes(bytes(data))


def test_the_gateway_refuses_to_start_on_damage_inside_the_file(home: Path) -> None:
    path = _healthy(home)
    _overwrite_pages(path)
    result = hermes("gateway", "run")
    assert result.returncode == 2, result.stderr
    assert "damaged" in result.stderr and ".recover" in result.stderr
    assert "Traceback" not in result.stderr


def _noise_in_the_middle(path: Path) -> None:
    """Random bytes over whole pages in the middle of the file (tables and indexes
    alike), the header left intact: SQLite opens it, and only reading finds it."""
    import random

    data = bytearray(path.read_bytes())
    page = 4096
    pages = len(data) // page
    noise = random.Random(7)
    for number in range(pages // 3, pages // 3 + 6):
        data[number * page : (number + 1) * page] = noise.randbytes(page)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "command",
    [["sessions", "list"], ["memory", "status"], ["users", "list"], ["gateway", "run"]],
)
def test_noise_over_pages_inside_the_file_is_one_clear_message_everywhere(
    home: Path, command: list[str]
) -> None:
    path = _healthy(home)
    _noise_in_the_middle(path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result = hermes(*command)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "damaged" in result.stderr and ".recover" in result.stderr and "backup" in result.stderr
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


HOLD = """
import sqlite3, sys, time
raw = sqlite3.connect(sys.argv[1], isolation_level=None)
raw.execute("PRAGMA locking_mode=EXCLUSIVE")  # no other connection may even read it
raw.execute("BEGIN EXCLUSIVE")
raw.execute("CREATE TABLE IF NOT EXISTS held (a)")
raw.execute("COMMIT")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _hold(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process holding state.db locked for `seconds` (an `sqlite3` shell left in
    exclusive mode, a backup tool): started, and holding the lock, when this returns."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_state_db_locked_past_sqlites_own_wait_is_waited_for(home: Path) -> None:
    """Locked longer than SQLite's busy timeout (2 s) but within the patience: it opens
    once the other process lets go, instead of being called damaged."""
    path = _healthy(home)
    holder = _hold(path, BUSY_TIMEOUT_MS / 1000 + 1.5)
    started = time.monotonic()
    db = SessionDB(path, patience=30.0)
    waited = time.monotonic() - started
    holder.communicate(timeout=30)
    assert waited > BUSY_TIMEOUT_MS / 1000  # it did wait past SQLite's own timeout
    assert db.people.ensure_user("u_00000000000000aa").id  # and the database is whole
    db.close()


def test_a_state_db_locked_past_the_patience_says_locked_not_damaged(home: Path) -> None:
    path = _healthy(home)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    holder = _hold(path, 60)
    try:
        with pytest.raises(DatabaseBusyError) as caught:
            SessionDB(path, patience=3.0)
    finally:
        holder.kill()
        holder.communicate()
    message = str(caught.value)
    assert "locked by another process" in message and str(path) in message
    assert "damaged" not in message and ".recover" not in message
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("call", ["a message appended", "a person added", "a read"])
def test_a_call_on_a_new_connection_waits_for_a_lock_past_sqlites_own_wait(
    home: Path, call: str
) -> None:
    """A lock met while connecting (a new connection's pragmas) is waited for like one
    met by BEGIN IMMEDIATE: by the hot path's writes (raw sqlite3), the ORM's, and reads."""
    path = _healthy(home)
    db = SessionDB(path, patience=30.0)
    user = db.people.ensure_user("u_00000000000000bb").id
    chat = db.conversations.start_session(user, "cli", "b")
    db.conversations.add_message(chat.id, NewMessage("user", "before the lock"))
    db.engine.dispose()  # no pooled connection left: the next call connects anew
    holder = _hold(path, BUSY_TIMEOUT_MS / 1000 + 1.5)
    try:
        if call == "a message appended":
            db.conversations.add_message(chat.id, NewMessage("user", "written after the lock"))
        elif call == "a person added":
            db.people.ensure_user("u_00000000000000cc")
        else:
            read = [m.content for m in db.conversations.messages(chat.id, user)]
    finally:
        holder.communicate(timeout=30)
    stored = [m.content for m in db.conversations.messages(chat.id, user)]
    if call == "a message appended":
        assert stored == ["before the lock", "written after the lock"]
    elif call == "a person added":
        assert db.people.get_user("u_00000000000000cc") is not None
    else:
        assert read == stored == ["before the lock"]
    db.close()
