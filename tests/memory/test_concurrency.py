"""Real processes on one store: no lost update, and no torn file after SIGKILL."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hermes.config import MemoryConfig
from hermes.identity import owner_user_id
from hermes.memory import entries as fmt
from hermes.memory.store import MemoryStore, Target
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from tests.harness.cli import Forked
from tests.memory.stores import backend_of, stored

WORKER = str(Path(__file__).with_name("store_worker.py"))


@pytest.mark.slow
def test_eight_processes_lose_no_update(home: Path, database_url: str | None) -> None:
    """On the file (flock) and on PostgreSQL (the row, in one transaction with its
    provenance): 8 processes x 101 recorded operations on one person's store."""
    user_id = owner_user_id(home)
    url = database_url or "-"
    workers, rounds = 8, 34  # 34 rounds x (add, replace, remove 2 of 3) = 101 ops each
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, "churn", str(home), user_id, str(w), str(rounds), url],
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
    memory, db = _stores(home, user_id, database_url)
    try:
        text = stored(memory) or ""
        events = db.memory_log.memory_events(user_id)
    finally:
        db.close()
    expected = {f"[p{w}:E{j}]" for w in range(workers) for j in range(rounds) if j % 3 == 0}
    entries = fmt.parse(text)
    assert set(entries) == expected and len(entries) == len(expected)
    assert text == fmt.serialize(entries)
    assert len(events) == workers * (rounds + rounds + (rounds - len(range(0, rounds, 3))))


def _stores(home: Path, user_id: str, url: str | None) -> tuple[UserMemory, SessionDB]:
    db = SessionDB.open(home, url)
    config = MemoryConfig(backend=backend_of("postgresql" if url else "sqlite"))
    return UserMemory(home, user_id, config, db), db


@pytest.mark.slow
def test_sigkill_mid_write_leaves_old_or_new_never_torn(tmp_path: Path) -> None:
    from tests.memory.store_worker import window

    path = tmp_path / "store" / "MEMORY.md"
    size = 12
    rng = random.Random(7)
    kills = mid_write = 0
    for _ in range(25):
        with Forked(WORKER, "rewrite", str(path), str(size)) as proc:
            proc.stdout.readline()  # one write is done: the file exists from here on
            time.sleep(rng.uniform(0.0, 0.05))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        kills += 1
        mid_write += any(path.parent.glob(".tmp-*"))
        raw = path.read_bytes()
        entries = fmt.parse(raw.decode("utf-8"))  # valid UTF-8, never empty
        first = int(entries[0].split("]")[0].removeprefix("[w:"))
        assert entries == window(first, size), "torn or mixed file after SIGKILL"
        assert raw.decode("utf-8") == fmt.serialize(entries)
    print(f"{mid_write}/{kills} kills landed while a temp file was being written")
    assert mid_write >= 1, "no kill landed mid-write; the test did not exercise the crash"
    assert kills == 25
    # a later writer cleans up what dead writers left behind
    MemoryStore(path, Target.MEMORY, 100_000).mutate(lambda state: (["done"], None))
    assert sorted(p.name for p in path.parent.iterdir()) == ["MEMORY.md", "MEMORY.md.lock"]


@pytest.mark.slow
@pytest.mark.parametrize("writer", ["journal", "undo"], ids=["the tool", "undo"])
def test_sigkill_between_file_and_record_leaves_no_unexplained_change(
    home: Path, writer: str, database_url: str | None
) -> None:
    """A writer killed at random moments, again and again: after each restart every
    entry on disk is explained by a recorded event and the record matches the file.
    The tool decides under the lock; undo (like consolidation and merges) decided
    before it and swaps: both go through the one journal. (On PostgreSQL the store and
    its record are one transaction: the same check proves nothing is half done.)"""
    from hermes.memory.service import MemoryService

    user_id = owner_user_id(home)
    rng = random.Random(7)
    for _ in range(30):
        with Forked(WORKER, writer, str(home), user_id, database_url or "-") as proc:
            assert proc.stdout.readline(), "the writer did not start"
            time.sleep(rng.uniform(0.0, 0.05))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    memory, db = _stores(home, user_id, database_url)
    try:
        service = MemoryService(home, memory.config, db)
        service.reconcile(user_id)  # what the next process does before using the store
        store = service.of(user_id).store(Target.MEMORY)
        state = store.read()
        events = db.memory_log.memory_events(user_id)
        explained = {e.entry_after for e in events if e.action == "add"}
        assert explained, "the writer never wrote"
        assert set(state.entries) <= explained  # every entry has the event that wrote it
        assert not [e for e in events if e.action == "outside"]  # nothing was lost in between
        assert db.memory_log.unsettled(user_id, "memory") == ([], state.raw)
    finally:
        db.close()


@pytest.mark.slow
def test_concurrent_link_chains_leave_every_entry_with_the_survivor(tmp_path: Path) -> None:
    """X<-Y and Y<-Z linked at the same moment in two processes while a third writes to
    Z (under the id it knew before): every entry of the three, and every late write that
    was stored, ends in the survivor's store, and state.db holds one person."""
    rng = random.Random(11)
    for trial in range(8):
        home = tmp_path / f"trial{trial}"
        db = SessionDB.open(home)
        try:
            ids = {}
            for name, (platform, ident) in {
                "x": ("telegram", "1"),
                "y": ("slack", "U1"),
                "z": ("discord", "9"),
            }.items():
                ids[name] = user = db.people.user_for_identity(platform, ident)
                memory = UserMemory(home, user, MemoryConfig())
                memory.folder.mkdir(parents=True)
                (memory.folder / "MEMORY.md").write_text(
                    fmt.serialize([f"{name} note {k}" for k in range(3)])
                )
                (memory.folder / "USER.md").write_text(fmt.serialize([f"{name} profile"]))
            code_x = db.access.create_link_code(ids["x"]).code
            code_y = db.access.create_link_code(ids["y"]).code
        finally:
            db.close()
        start = f"{time.time() + 1.0 + rng.uniform(0, 0.01):.6f}"  # all three at once
        runs = [
            ["link", str(home), code_x, "slack:U1", ids["y"], start],
            ["link", str(home), code_y, "discord:9", ids["z"], start],
            ["remember", str(home), ids["z"], "12", start],
        ]
        procs = [Forked(WORKER, *args, stderr=True) for args in runs]
        outputs = [proc.communicate() for proc in procs]
        for proc, (_, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, err
        assert all(out.startswith("True") for out, _ in outputs[:2]), outputs
        late = outputs[2][0].split("\n")[:-1]
        assert late, "the writer stored nothing"

        db = SessionDB.open(home)
        try:
            survivor = db.people.user_for_identity("telegram", "1")
            assert survivor == ids["x"]
            for platform, ident in (("telegram", "1"), ("slack", "U1"), ("discord", "9")):
                assert db.people.user_for_identity(platform, ident) == survivor
            kept = UserMemory(home, survivor, MemoryConfig())
            notes = set(kept.store(Target.MEMORY).read().entries)
            profile = set(kept.store(Target.USER).read().entries)
        finally:
            db.close()
        for name in "xyz":
            assert {f"{name} note {k}" for k in range(3)} <= notes, (trial, name, notes)
            assert f"{name} profile" in profile, (trial, name, profile)
        assert set(late) <= notes, (trial, set(late) - notes)
        assert not (home / "memories" / ids["y"]).exists()
        assert not (home / "memories" / ids["z"]).exists()
