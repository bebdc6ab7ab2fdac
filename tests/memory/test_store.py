"""The store file: permissions, atomic writes, hand-edited files, locking. About the
file itself (memory.backend: files), so on SQLite's side only; what the database store
does with the same situations is in test_tool.py (both backends)."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from hermes.memory.store import MemoryStore, StoreBusyError, StoreDamagedError, Target
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory
from tests.harness.postgres import sqlite_only

pytestmark = sqlite_only


def test_folders_are_0700_and_files_0600(tool: MemoryTool, memory: UserMemory, home: Path) -> None:
    tool.run({"action": "add", "target": "memory", "content": "a"})
    tool.run({"action": "add", "target": "user", "content": "b"})
    assert (home / "memories").stat().st_mode & 0o777 == 0o700
    assert memory.folder.stat().st_mode & 0o777 == 0o700
    for name in ("MEMORY.md", "USER.md", "MEMORY.md.lock"):
        assert (memory.folder / name).stat().st_mode & 0o777 == 0o600


def test_a_loose_user_folder_is_tightened_on_write(tool: MemoryTool, memory: UserMemory) -> None:
    memory.folder.mkdir(parents=True, mode=0o755)
    memory.folder.chmod(0o755)
    tool.run({"action": "add", "target": "memory", "content": "a"})
    assert memory.folder.stat().st_mode & 0o777 == 0o700


def test_file_holds_nothing_but_entries_and_separators(
    tool: MemoryTool, memory: UserMemory
) -> None:
    for text in ("one", "two\nlines", "three"):
        tool.run({"action": "add", "target": "memory", "content": text})
    assert (memory.folder / "MEMORY.md").read_text() == "one\n§\ntwo\nlines\n§\nthree"


def test_whitespace_only_file_means_no_entries(tool: MemoryTool, memory: UserMemory) -> None:
    memory.folder.mkdir(parents=True)
    (memory.folder / "MEMORY.md").write_text("  \n\n \t\n")
    assert memory.store(Target.MEMORY).read().entries == ()
    assert memory.snapshot() == ""


def test_free_text_over_the_limit_is_backed_up_and_never_overwritten(
    tool: MemoryTool, memory: UserMemory
) -> None:
    memory.folder.mkdir(parents=True)
    path = memory.folder / "MEMORY.md"
    original = ("I pasted my whole project README here without separators. " * 60).encode()
    path.write_bytes(original)
    for _ in range(3):
        result = tool.run({"action": "add", "target": "memory", "content": "new fact"}).result
        assert result["success"] is False
        assert "edited outside Hermes" in result["error"] and "no '§' separator" in result["error"]
        assert "line holding only '§'" in result["error"]
    assert path.read_bytes() == original
    backups = list(memory.folder.glob("MEMORY.md.*.bak"))
    assert len(backups) == 1  # one backup per distinct content, not one per attempt
    assert backups[0].read_bytes() == original
    assert backups[0].name in result["error"]
    assert backups[0].stat().st_mode & 0o777 == 0o600


def test_invalid_utf8_file_is_backed_up_and_left_alone(
    tool: MemoryTool, memory: UserMemory
) -> None:
    memory.folder.mkdir(parents=True)
    path = memory.folder / "USER.md"
    path.write_bytes(b"Name: Mina\n\xff\xfe broken")
    result = tool.run({"action": "remove", "target": "user", "old_text": "Mina"}).result
    assert result["success"] is False and "not valid UTF-8" in result["error"]
    assert path.read_bytes() == b"Name: Mina\n\xff\xfe broken"
    assert len(list(memory.folder.glob("USER.md.*.bak"))) == 1


def test_over_limit_store_renders_bounded(memory: UserMemory) -> None:
    memory.folder.mkdir(parents=True)
    (memory.folder / "MEMORY.md").write_text("x" * 10_000)
    snapshot = memory.snapshot()
    assert len(snapshot) < 2200 + 400 and "truncated" in snapshot


def test_stale_temp_files_of_a_dead_writer_are_removed(
    tool: MemoryTool, memory: UserMemory
) -> None:
    memory.folder.mkdir(parents=True)
    stale = memory.folder / ".tmp-MEMORY.md.deadbeef0000"
    stale.write_text("half a wri")
    tool.run({"action": "add", "target": "memory", "content": "a"})
    assert not stale.exists()


def test_a_held_lock_makes_writers_wait_then_proceed(memory: UserMemory, tool: MemoryTool) -> None:
    store = memory.store(Target.MEMORY)
    store.path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(store.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    done = threading.Event()

    def writer() -> None:
        tool.run({"action": "add", "target": "memory", "content": "after the lock"})
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.2)
    assert not done.is_set()  # blocked by the lock
    os.close(fd)
    thread.join(5)
    assert done.is_set() and store.read().entries == ("after the lock",)


def test_lock_timeout_is_a_clear_error(memory: UserMemory) -> None:
    store = MemoryStore(memory.folder / "MEMORY.md", Target.MEMORY, 2200, lock_timeout=0.1)
    store.path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(store.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(StoreBusyError, match="locked by another process"):
            store.mutate(lambda state: (["x"], None))
    finally:
        os.close(fd)


def _kernel_waiters(path: Path) -> int:
    """How many flock requests on `path` sleep in the kernel (blocked lines of /proc/locks)."""
    inode = os.stat(path).st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if "->" in line and line.split()[-3].endswith(f":{inode}"))


def test_a_waiting_writer_sleeps_in_the_kernel_not_in_a_poll_loop(
    memory: UserMemory, tool: MemoryTool
) -> None:
    store = memory.store(Target.MEMORY)
    store.path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(store.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    thread = threading.Thread(
        target=tool.run, args=({"action": "add", "target": "memory", "content": "queued"},)
    )
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while _kernel_waiters(store.lock_path) == 0:
            assert time.monotonic() < deadline, "the writer never queued for the lock"
            time.sleep(0.01)
    finally:
        os.close(fd)
    thread.join(5)
    assert store.read().entries == ("queued",)


def test_a_timed_out_wait_never_leaves_the_store_locked(memory: UserMemory) -> None:
    store = MemoryStore(memory.folder / "MEMORY.md", Target.MEMORY, 2200, lock_timeout=0.1)
    store.path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(store.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    with pytest.raises(StoreBusyError):
        store.mutate(lambda state: (["x"], None))
    os.close(fd)  # the abandoned waiter gets the lock now and must let go of it
    store.lock_timeout = 2.0
    store.mutate(lambda state: (["after"], None))
    assert store.read().entries == ("after",)
    # free again: the abandoned waiter may be granted the lock after the mutate let go
    # of it, and lets go at once; it must never keep it (checked until free, 5 s at most)
    probe = os.open(store.lock_path, os.O_RDWR)
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.monotonic() < deadline, "the store stayed locked"
                time.sleep(0.01)
    finally:
        os.close(probe)


def test_damaged_error_is_raised_before_deciding(memory: UserMemory) -> None:
    store = memory.store(Target.MEMORY)
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_bytes(b"\xff")
    called = []
    with pytest.raises(StoreDamagedError):
        store.mutate(lambda state: (called.append(1) or ["x"], None))
    assert called == []
