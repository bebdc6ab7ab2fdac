"""`hermes backup create|restore`: one archive of everything a home holds, verifiable.

The archive (`.tar.gz`, written 0600) holds `manifest.json` first, then state.db as an
online snapshot (SQLite's backup API, safe while the gateway runs), the memories folder
(each store is replaced atomically on write, so every file copied is one whole version),
the config and the other files of the home. Left out: the secrets (they live in the
environment or the service's env file, never in the home; a file named `env`/`.env`/
`*.env` is skipped too), runtime files (locks, the status file), SQLite's WAL and shared
memory (the snapshot replaces them) and the backups folder itself.

The manifest lists every file with its size and SHA-256. Restore checks the archive
completely (each member present, regular, inside the home, matching its checksum, no
member unlisted) before it changes anything; it refuses a home that has data unless
forced, and then first saves that data as a backup of its own ("pre-restore").
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from hermes.identity import ensure_private_dir
from hermes.state.db import STATE_DB_FILENAME, SessionDB
from hermes.state.engine import snapshot_file

FORMAT = 1
MANIFEST = "manifest.json"
BACKUPS_DIR = "backups"
EXTERNAL = "external"
SKIPPED_NAMES = frozenset({"gateway.lock", "gateway.json", "env", ".env", BACKUPS_DIR})
SKIPPED_SUFFIXES = (".lock", ".env", "-wal", "-shm", "-journal", ".tmp")
Progress = Callable[[int, int], None]  # (files done, files in all)


class BackupError(Exception):
    """The archive cannot be written, read or trusted; the message says why."""


@dataclass(frozen=True, slots=True)
class Summary:
    path: Path
    files: int
    bytes: int
    created_at: str
    replaced_backup: Path | None = None  # restore --force: the home's data before
    external: dict[str, str] = field(default_factory=dict)  # restored file -> where it was


def default_path(home: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return home / BACKUPS_DIR / f"hermes-backup-{stamp}.tar.gz"


def _kept(relative: PurePosixPath) -> bool:
    first, name = relative.parts[0], relative.name
    if first in SKIPPED_NAMES or name in SKIPPED_NAMES or name == STATE_DB_FILENAME:
        return False
    return not name.endswith(SKIPPED_SUFFIXES) and ".recover" not in name


def _home_files(home: Path) -> Iterator[tuple[PurePosixPath, Path]]:
    for path in sorted(home.rglob("*")):
        relative = PurePosixPath(path.relative_to(home).as_posix())
        if path.is_file() and not path.is_symlink() and _kept(relative):
            yield relative, path


def create(
    home: Path,
    target: Path | None = None,
    progress: Progress | None = None,
    extra: Sequence[Path] = (),
) -> Summary:
    """Write one archive of `home` to `target` (default: HERMES_HOME/backups/...).
    `extra`: files outside the home that belong to it (a memory provider's
    `backup_paths`), archived under external/ with where they came from; a restore puts
    them in HERMES_HOME/external/ (an archive never writes outside the home) and names
    their original places (`Summary.external`)."""
    target = target or default_path(home)
    if target.exists():
        raise BackupError(f"{target} already exists: choose another path")
    if not target.parent.is_dir():
        if target.parent == home / BACKUPS_DIR:
            ensure_private_dir(target.parent)
        else:
            raise BackupError(f"{target.parent} is not a folder")
    with tempfile.TemporaryDirectory(prefix="hermes-backup-") as scratch:
        entries: list[tuple[str, Path]] = []
        if (home / STATE_DB_FILENAME).exists():
            snapshot = Path(scratch) / STATE_DB_FILENAME
            db = SessionDB.open(home)
            try:
                db.upkeep.snapshot(snapshot)
            finally:
                db.close()
            entries.append((STATE_DB_FILENAME, snapshot))
        for relative, path in _home_files(home):  # copied first: a store replaced while
            copy = Path(scratch) / "home" / relative  # the archive is written must still
            copy.parent.mkdir(parents=True, exist_ok=True)  # match its checksum
            try:  # another SQLite file (a provider's store): a consistent snapshot
                if not (path.suffix == ".db" and snapshot_file(path, copy)):
                    shutil.copyfile(path, copy)
            except FileNotFoundError:  # removed meanwhile (a consolidation's temp file)
                continue
            entries.append((str(relative), copy))
        origins = _copy_external(extra, Path(scratch), entries)
        files = [_described(name, path) | _origin(origins, name) for name, path in entries]
        manifest = {
            "format": FORMAT,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "hermes_version": _version(),
            "source_home": str(home),
            "files": files,
        }
        partial = target.with_name(target.name + ".tmp")
        try:
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as raw:
                with tarfile.open(fileobj=raw, mode="w:gz") as tar:
                    _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=2).encode())
                    for done, (name, path) in enumerate(entries, 1):
                        _add_file(tar, name, path)
                        if progress:
                            progress(done, len(entries))
                raw.flush()  # after the archive's last blocks, which close() writes
                os.fsync(raw.fileno())
            os.replace(partial, target)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise BackupError(f"cannot write {target}: {exc.strerror or exc}") from None
    size = sum(int(f["size"]) for f in files)
    return Summary(target, len(files), size, str(manifest["created_at"]))


def _copy_external(
    extra: Sequence[Path], scratch: Path, entries: list[tuple[str, Path]]
) -> dict[str, str]:
    """Copy files from outside the home into the scratch folder, as external/ entries;
    returns each entry's original path."""
    origins = {}
    for index, outside in enumerate(p for p in extra if p.is_file()):
        name = f"{EXTERNAL}/{index}-{outside.name}"
        copy = scratch / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(outside, copy)
        entries.append((name, copy))
        origins[name] = str(outside.resolve())
    return origins


def _origin(origins: dict[str, str], name: str) -> dict[str, Any]:
    return {"origin": origins[name]} if name in origins else {}


def _described(name: str, path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return {"path": name, "size": size, "sha256": digest.hexdigest()}


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o600
    info.mtime = int(datetime.now(UTC).timestamp())
    tar.addfile(info, io.BytesIO(data))


def _add_file(tar: tarfile.TarFile, name: str, path: Path) -> None:
    info = tar.gettarinfo(str(path), arcname=name)
    info.mode, info.uid, info.gid, info.uname, info.gname = 0o600, 0, 0, "", ""
    with path.open("rb") as handle:
        tar.addfile(info, handle)


def verify(archive: Path) -> dict[str, Any]:
    """The manifest, once every member is checked against it; BackupError otherwise."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            manifest = _manifest(tar)
            listed = {str(f["path"]): f for f in manifest["files"]}
            seen: set[str] = set()
            for member in tar.getmembers():
                if member.name == MANIFEST:
                    continue
                expected = listed.get(member.name)
                if expected is None or not member.isfile() or not _safe(member.name):
                    raise BackupError(f"{archive}: unexpected member {member.name!r}")
                handle = tar.extractfile(member)
                assert handle is not None
                digest = hashlib.sha256(handle.read()).hexdigest()
                if digest != expected["sha256"] or member.size != expected["size"]:
                    raise BackupError(f"{archive}: {member.name} does not match its checksum")
                seen.add(member.name)
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise BackupError(f"{archive}: not a readable Hermes backup ({exc})") from None
    missing = sorted(set(listed) - seen)
    if missing:
        raise BackupError(f"{archive}: incomplete, missing {', '.join(missing[:5])}")
    return manifest


def _manifest(tar: tarfile.TarFile) -> dict[str, Any]:
    try:
        member = tar.getmember(MANIFEST)
        handle = tar.extractfile(member)
        assert handle is not None
        manifest = json.loads(handle.read())
    except (KeyError, ValueError, AssertionError):
        raise BackupError("no valid manifest.json: not a Hermes backup") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"unknown backup format {manifest.get('format')!r}")
    return manifest


def _safe(name: str) -> bool:
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and bool(path.parts)


def has_data(home: Path) -> list[str]:
    """What in `home` a restore would replace."""
    if not home.exists():
        return []
    found = [STATE_DB_FILENAME] if (home / STATE_DB_FILENAME).exists() else []
    return found + sorted(str(relative) for relative, _ in _home_files(home))


def restore(
    archive: Path, home: Path, force: bool = False, progress: Progress | None = None
) -> Summary:
    """Replace `home`'s data with the archive's, after verifying all of it. The caller
    holds the home's instance lock (no gateway runs meanwhile)."""
    manifest = verify(archive)
    present = has_data(home)
    saved = None
    if present and not force:
        shown = ", ".join(present[:4]) + (" ..." if len(present) > 4 else "")
        raise BackupError(
            f"{home} already holds data ({shown}): restoring would replace it; "
            "add --force to replace it (it is saved as a backup first)"
        )
    ensure_private_dir(home)
    if present:
        saved = create(home, home / BACKUPS_DIR / f"pre-restore-{_stamp()}.tar.gz").path
        _clear(home)
    files = manifest["files"]
    with tarfile.open(archive, mode="r:gz") as tar:
        for done, entry in enumerate(files, 1):
            name = str(entry["path"])
            destination = home / name  # external files too: never outside the home
            ensure_private_dir(destination.parent)
            handle = tar.extractfile(name)
            assert handle is not None
            fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(handle, out)
                out.flush()
                os.fsync(out.fileno())
            if progress:
                progress(done, len(files))
    size = sum(int(f["size"]) for f in files)
    external = {str(home / f["path"]): str(f["origin"]) for f in files if f.get("origin")}
    return Summary(archive, len(files), size, str(manifest["created_at"]), saved, external)


def _clear(home: Path) -> None:
    """Remove the data a restore replaces (state.db with its WAL, the stores, the config)."""
    for name in (STATE_DB_FILENAME, *(STATE_DB_FILENAME + s for s in ("-wal", "-shm"))):
        (home / name).unlink(missing_ok=True)
    for child in home.iterdir():
        if child.name in SKIPPED_NAMES:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        elif _kept(PurePosixPath(child.name)):
            child.unlink()


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def _version() -> str:
    try:
        return metadata.version("hermes-gateway")
    except metadata.PackageNotFoundError:
        return "unknown"


__all__ = ["BackupError", "Summary", "create", "default_path", "has_data", "restore", "verify"]
