"""A full disk or a read-only HERMES_HOME: one clear message naming the file and what to
do, exit 2, no traceback, nothing changed; once the disk has room again, nothing is
missing from the memory or its record. Real file systems: small tmpfs mounts (skipped
where this user may not mount one; under CI that skip fails unless accepted by name, see
tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes.identity import owner_user_id
from tests.fakes.openai_server import FakeOpenAI
from tests.harness.cli import hermes


def _mount(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")


def _remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    mounted: list[Path] = []
    yield mounted
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:  # ENOSPC: the file system is full
        pass
    finally:
        os.close(fd)
    return filler


def _memories_on_their_own_mount(home: Path, mounts: list[Path], size: str) -> Path:
    """A home with one memory entry whose memories folder is a tmpfs of `size`."""
    assert hermes("memory", "add", "Lives in Lisbon").returncode == 0
    folder = home / "memories"
    saved = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    _mount(folder, size)
    mounts.append(folder)
    for name, data in saved.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def _clean(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out and all(f in out for f in fragments), out


def test_a_full_disk_under_the_memory_files_refuses_the_write_and_loses_nothing(
    home: Path, mounts: list[Path]
) -> None:
    folder = _memories_on_their_own_mount(home, mounts, "64k")
    store = folder / owner_user_id(home) / "MEMORY.md"
    before = store.read_bytes()
    filler = _fill(folder)

    _clean(hermes("memory", "add", "Has a cat named Miso"), str(store), "disk is full")
    assert store.read_bytes() == before

    filler.unlink()
    assert hermes("memory", "add", "Has a dog").returncode == 0
    shown = hermes("memory", "show").stdout
    assert "Lives in Lisbon" in shown and "Has a dog" in shown and "Miso" not in shown
    why = hermes("memory", "why", "dog").stdout
    assert "Has a dog" in why and "outside Hermes" not in why


def test_a_read_only_memory_folder_refuses_the_write_clearly(
    home: Path, mounts: list[Path]
) -> None:
    folder = _memories_on_their_own_mount(home, mounts, "1m")
    _remount(folder, "ro")
    _clean(hermes("memory", "add", "Has a cat"), "read-only", "HERMES_HOME")
    assert "Lives in Lisbon" in hermes("memory", "show").stdout


@pytest.mark.parametrize("command", [("memory", "add", "Has a cat"), ("sessions", "list")])
def test_a_read_only_or_full_hermes_home_is_one_clear_message(
    tmp_path: Path, mounts: list[Path], command: tuple[str, ...]
) -> None:
    root = tmp_path / "fs"
    _mount(root, "4m")
    mounts.append(root)
    home = root / "home"
    assert hermes("memory", "add", "Lives in Lisbon", home=home).returncode == 0
    assert hermes("sessions", "list", home=home).returncode == 0
    db = home / "state.db"

    filler = _fill(root)
    _clean(hermes(*command, home=home), str(db))
    filler.unlink()

    _remount(root, "ro")
    result = hermes(*command, home=home)
    if command[0] == "sessions":  # showing needs no write: a read-only home is still read
        assert result.returncode == 0 and "No sessions" in result.stdout, result.stderr
    else:
        _clean(result, "read-only", "Nothing was changed", "HERMES_HOME")
    _remount(root, "rw")
    assert "Lives in Lisbon" in hermes("memory", "show", home=home).stdout
    assert hermes(*command, home=home).returncode == 0


def _fill_leaving(folder: Path, room: int) -> Path:
    """Fill the file system `folder` is on, but for `room` bytes."""
    filler = folder / "filler"
    free = os.statvfs(folder)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"\0" * max(0, free.f_bavail * free.f_frsize - room))
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("command", ["add", "replace", "chat"])
def test_a_disk_that_fills_mid_command_is_one_clear_message(
    tmp_path: Path, mounts: list[Path], fake_llm: FakeOpenAI, command: str
) -> None:
    """About 64 KB left: the first writes fit, a later one (SQLite's commit) does not.
    One message naming state.db and the full disk, exit 2, never a traceback."""
    root = tmp_path / "fs"
    _mount(root, "4m")
    mounts.append(root)
    home = root / "home"
    home.mkdir()
    (home / "config.yaml").write_text(f"llm:\n  base_url: {fake_llm.base_url}\n  model: m\n")
    assert hermes("memory", "add", "Lives in Lisbon", home=home).returncode == 0
    assert hermes("sessions", "list", home=home).returncode == 0
    long = "Has a cat named Miso, " + "who likes the sunny window sill " * 20
    args = {
        "add": ("memory", "add", long),
        "replace": ("memory", "replace", "Lisbon", long),
        "chat": ("chat", "-q", long * 3),
    }[command]
    filler = _fill_leaving(root, 64 * 1024)
    result = hermes(*args, home=home)
    filler.unlink()
    said = result.stdout + result.stderr
    if command == "chat":  # the turn's reply says it
        assert result.returncode == 1 and "storage is full, failing or not" in said, said
    else:
        _clean(result, "disk is full")
    assert "Traceback" not in result.stdout + result.stderr
    assert hermes("memory", "show", home=home).returncode == 0  # usable once there is room
