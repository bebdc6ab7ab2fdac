"""`hermes backup`: a consistent archive taken while another process writes, restored into a
fresh home and compared with the original; tampering, overwrites and a running gateway
refused; secrets and runtime files never archived; archives 0600."""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from gateway.instance import InstanceLock
from gateway.ops import backup
from hermes.config import MemoryConfig
from hermes.identity import owner_user_id
from hermes.memory.store import Target
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.search import SearchScope
from tests.harness.cli import hermes

WRITER = """
import sys, time
from pathlib import Path
from hermes.config import MemoryConfig
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
home = Path(sys.argv[1])
db = SessionDB.open(home)
user = db.people.ensure_user("u_00000000000000bb").id
chat = db.conversations.start_session(user, "telegram", "k")
tool = MemoryTool(UserMemory(home, user, MemoryConfig()))
print("ready", flush=True)
n = 0
while True:  # messages into state.db and a store replaced again and again
    db.conversations.add_message(chat.id, NewMessage("user", f"busy message {n} " * 30))
    tool.run({"action": "add", "target": "memory", "content": f"Busy note {n}"})
    tool.run({"action": "remove", "target": "memory", "old_text": f"Busy note {n}"})
    n += 1
"""


def populate(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    (home / "config.yaml").write_text("memory:\n  memory_char_limit: 2200\n")
    (home / "SOUL.md").write_text("You are calm and brief.\n")
    (home / "env").write_text("TELEGRAM_BOT_TOKEN=123:secret\n")  # never archived
    (home / ".env").write_text("OPENAI_API_KEY=sk-secret\n")
    db = SessionDB.open(home)
    owner = owner_user_id(home)
    db.people.ensure_user(owner, role="owner")
    other = db.people.ensure_user("u_00000000000000aa").id
    for user in (owner, other):
        chat = db.conversations.start_session(user, "cli", f"key-{user}")
        for n in range(50):
            db.conversations.add_message(chat.id, NewMessage("user", f"{user} says {n} 우리 桜"))
        memory = UserMemory(home, user, MemoryConfig())
        tool = MemoryTool(memory)
        tool.run({"action": "add", "target": "memory", "content": f"Note for {user}"})
        tool.run({"action": "add", "target": "user", "content": "Prefers metric units"})
        assert memory.store(Target.MEMORY).read().entries
    db.close()


def tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    raw = sqlite3.connect(path)
    names = [
        row[0]
        for row in raw.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '%fts%' "
            "AND name NOT LIKE 'sqlite_%'"
        )
    ]
    dump = {name: sorted(map(tuple, raw.execute(f'SELECT * FROM "{name}"'))) for name in names}
    raw.close()
    return dump


def files(home: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(home)): p.read_bytes()
        for p in home.rglob("*")
        if p.is_file()
        and "backups" not in p.parts
        and not p.name.startswith("state.db")
        and not p.name.endswith(".lock")  # runtime files: each process makes its own
    }


def test_restoring_into_a_fresh_home_gives_back_everything_but_the_secrets(home: Path) -> None:
    populate(home)
    archive = home.parent / "one.tar.gz"
    summary = backup.create(home, archive)
    assert archive.stat().st_mode & 0o777 == 0o600
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert names[0] == "manifest.json" and "state.db" in names
    assert not {"env", ".env"} & set(names) and not any(n.endswith(".lock") for n in names)
    fresh = home.parent / "fresh"
    restored = backup.restore(archive, fresh)
    assert restored.files == summary.files
    expected = {k: v for k, v in files(home).items() if k not in ("env", ".env")}
    assert files(fresh) == expected  # the stores, the config, SOUL.md, owner_id, byte for byte
    assert tables(fresh / "state.db") == tables(home / "state.db")
    db = SessionDB.open(fresh)  # and the restored database works
    assert db.upkeep.integrity_check() == "ok"
    hits = db.conversations.search(SearchScope(owner_user_id(fresh)), "우리")
    assert hits  # the search index came along
    db.close()
    modes = {p.stat().st_mode & 0o777 for p in fresh.rglob("*") if p.is_file()}
    assert modes == {0o600}


def test_a_backup_taken_while_another_process_writes_is_consistent(home: Path) -> None:
    populate(home)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(home)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        for n in range(3):  # each archive must verify, whatever was replaced meanwhile
            shown = hermes("backup", "create", str(home.parent / f"busy{n}.tar.gz"), home=home)
            assert shown.returncode == 0, shown.stderr
            backup.verify(home.parent / f"busy{n}.tar.gz")
        assert writer.poll() is None  # the writer was never stopped or failed
    finally:
        writer.kill()
        writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()
    fresh = home.parent / "fresh"
    backup.restore(home.parent / "busy2.tar.gz", fresh)
    raw = sqlite3.connect(fresh / "state.db")
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    busy = raw.execute("SELECT count(*) FROM messages WHERE content LIKE 'busy%'").fetchone()[0]
    assert busy > 0
    raw.close()


def test_a_tampered_or_truncated_archive_is_refused_and_nothing_changes(home: Path) -> None:
    populate(home)
    archive = home.parent / "good.tar.gz"
    backup.create(home, archive)
    tampered = home.parent / "tampered.tar.gz"
    with tarfile.open(archive) as src, tarfile.open(tampered, "w:gz") as out:
        for member in src.getmembers():
            handle = src.extractfile(member)
            assert handle is not None
            data = handle.read()
            if member.name.endswith("MEMORY.md"):
                data = data.replace(b"Note", b"Evil")
            member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    fresh = home.parent / "fresh"
    with pytest.raises(backup.BackupError, match="checksum"):
        backup.restore(tampered, fresh)
    assert backup.has_data(fresh) == []
    truncated = home.parent / "truncated.tar.gz"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(backup.BackupError, match="not a readable"):
        backup.restore(truncated, fresh)
    shown = hermes("backup", "restore", str(tampered), home=fresh)
    assert shown.returncode == 1 and "checksum" in shown.stderr and "Traceback" not in shown.stderr


def test_restore_refuses_a_home_with_data_unless_forced_and_keeps_what_it_replaced(
    home: Path,
) -> None:
    populate(home)
    archive = home.parent / "first.tar.gz"
    backup.create(home, archive)
    before = files(home)
    (home / "SOUL.md").write_text("changed after the backup\n")
    refused = hermes("backup", "restore", str(archive), home=home)
    assert refused.returncode == 1 and "--force" in refused.stderr
    assert (home / "SOUL.md").read_text() == "changed after the backup\n"
    forced = hermes("backup", "restore", str(archive), "--force", home=home)
    assert forced.returncode == 0, forced.stderr
    assert files(home) == before  # the secrets files were left where they were
    saved = sorted((home / "backups").glob("pre-restore-*.tar.gz"))
    assert len(saved) == 1
    backup.restore(saved[0], home.parent / "previous")
    assert (home.parent / "previous" / "SOUL.md").read_text() == "changed after the backup\n"


def test_restore_waits_for_no_gateway_and_bad_paths_are_clear(home: Path) -> None:
    populate(home)
    archive = home.parent / "x.tar.gz"
    backup.create(home, archive)
    lock = InstanceLock(home)
    lock.acquire()  # a gateway holds this home
    try:
        shown = hermes("backup", "restore", str(archive), "--force", home=home)
        assert shown.returncode == 1 and "already running" in shown.stderr
        unit = "hermes-gateway"  # deploy/hermes-gateway.service: the name to stop it by
        assert (Path(__file__).parents[2] / "deploy" / f"{unit}.service").exists()
        assert f"systemctl stop {unit}" in " ".join(shown.stderr.split())
    finally:
        lock.release()
    missing = hermes("backup", "restore", str(home.parent / "nope.tar.gz"), home=home)
    assert missing.returncode == 2 and "no such file" in missing.stderr
    nowhere = hermes("backup", "create", str(home.parent / "no" / "dir" / "b.tgz"), home=home)
    assert nowhere.returncode == 1 and "no/dir does not exist: create it" in nowhere.stderr
    (home.parent / "file").write_text("")
    a_file = hermes("backup", "create", str(home.parent / "file" / "b.tgz"), home=home)
    assert a_file.returncode == 1 and "is not a folder" in a_file.stderr
    again = hermes("backup", "create", str(archive), home=home)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert "Traceback" not in missing.stderr + nowhere.stderr + again.stderr
    assert os.stat(archive).st_mode & 0o777 == 0o600


# -- archives made by someone else: bounded, staged, never planting code ---------------------


def craft(path: Path, members: dict[str, bytes], *, manifest: bytes | None = None) -> Path:
    """A consistent archive (every member listed with its size and checksum) of whatever
    an attacker chose to put in it."""
    import hashlib
    import json

    listed = [
        {"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in members.items()
    ]
    head = {"format": 1, "created_at": "2026-12-01T00:00:00+00:00", "files": listed}
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [
            ("manifest.json", manifest or json.dumps(head).encode()),
            *members.items(),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_plugin_code_in_an_archive_is_not_restored_unless_asked(home: Path) -> None:
    populate(home)
    archive = home.parent / "good.tar.gz"
    backup.create(home, archive)
    with tarfile.open(archive) as tar:
        members = {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.name != "manifest.json"
        }
    planted = b"import os\nos.system('touch /tmp/pwned')\n"
    evil = craft(home.parent / "evil.tar.gz", {**members, "plugins/spy/__init__.py": planted})
    fresh = home.parent / "fresh"
    shown = hermes("backup", "restore", str(evil), home=fresh)
    assert shown.returncode == 0, shown.stderr
    assert "plugin code was not restored" in shown.stdout and "--with-plugins" in shown.stdout
    assert not (fresh / "plugins").exists() and (fresh / "SOUL.md").exists()
    again = home.parent / "again"
    summary = backup.restore(evil, again, with_plugins=True)
    assert (again / "plugins/spy/__init__.py").read_bytes() == planted
    assert summary.skipped_plugins == []


def test_a_state_db_that_is_not_a_database_never_replaces_the_home(home: Path) -> None:
    populate(home)
    before = files(home)
    for name, junk in (
        ("notdb", {"state.db": b"hello, I am not SQLite" * 100, "SOUL.md": b"x"}),
        ("otherdb", {"state.db": _empty_sqlite(home.parent), "SOUL.md": b"x"}),
    ):
        archive = craft(home.parent / f"{name}.tar.gz", junk)
        shown = hermes("backup", "restore", str(archive), "--force", home=home)
        assert shown.returncode == 1 and "state.db" in shown.stderr, shown.stderr
        assert "Traceback" not in shown.stderr
    assert files(home) == before and not list((home / "backups").glob("pre-restore-*"))
    assert not [p for p in home.iterdir() if p.name.startswith((".restoring-", ".replaced-"))]


def _empty_sqlite(folder: Path) -> bytes:
    path = folder / "empty.sqlite"
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE unrelated (x)")
    raw.commit()
    raw.close()
    return path.read_bytes()


def test_a_file_where_a_folder_should_be_is_refused_before_anything_changes(home: Path) -> None:
    populate(home)
    before = files(home)
    archive = craft(
        home.parent / "clash.tar.gz",
        {"memories": b"I am a file", "memories/u_x/MEMORY.md": b"note", "SOUL.md": b"x"},
    )
    shown = hermes("backup", "restore", str(archive), "--force", home=home)
    assert shown.returncode == 1 and "both as a file and as a folder" in shown.stderr
    assert "Traceback" not in shown.stderr and files(home) == before


def test_verification_streams_members_and_bounds_the_manifest(home: Path) -> None:
    """A 300 MB member (a few hundred KB compressed) is hashed as it streams by: the
    verifying process grows by far less than the member (measured in a child)."""
    big = home.parent / "big.tar.gz"
    data = bytes(300 * 1024 * 1024)
    craft(big, {"SOUL.md": data})
    del data
    child = f"""
import resource
from pathlib import Path
from gateway.ops import backup
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
backup.verify(Path({str(big)!r}))
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    grew = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert int(grew.stdout) < 64, f"verifying grew the process by {grew.stdout.strip()} MB"
    huge = craft(home.parent / "manifest.tar.gz", {}, manifest=b" " * (20 * 1024 * 1024) + b"{}")
    with pytest.raises(backup.BackupError, match=r"manifest\.json is not a small file"):
        backup.verify(huge)
