"""`hermes backup create|restore`: one archive of everything a home holds, verifiable.

The archive (`.tar.gz`, written 0600) holds `manifest.json` first, then state.db as an
online snapshot (SQLite's backup API, safe while the gateway runs; on PostgreSQL,
`state.pgdump`: pg_dump of Hermes's schema, one transaction), the memories folder
(each store is replaced atomically on write, so every file copied is one whole version),
the config and the other files of the home. Left out: the secrets (they live in the
environment or the service's env file, never in the home; a file named `env`/`.env`/
`*.env` is skipped too), runtime files (locks, the status file), SQLite's WAL and shared
memory (the snapshot replaces them) and the backups folder itself.

The manifest lists every file with its size and SHA-256. Restore checks the archive
completely (each member present, regular, inside the home, matching its checksum, no
member unlisted, streamed with bounded sizes) before it changes anything; it refuses a
home that has data unless forced, and then first saves that data as a backup of its own
("pre-restore"). It extracts into a staging folder, checks the databases, and swaps the
data in (rolled back on failure); plugin code only with --with-plugins.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from gateway.config import ConfigError, child_environment, load_config, update_config
from hermes.identity import OWNER_ID_FILENAME, ensure_private_dir
from hermes.state import postgres
from hermes.state.db import STATE_DB_FILENAME, SessionDB
from hermes.state.engine import StateDBError, check_file, redact, snapshot_file

FORMAT = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # a home of 100,000 files lists in well under this
MAX_MEMBERS = 200_000
PLUGINS_DIR = "plugins"  # code: restored only when asked (--with-plugins)
STAGING_PREFIX = ".restoring-"  # the archive extracted, inside the home (same disk)
ASIDE_PREFIX = ".replaced-"  # the home's data moved aside while the staged data moves in
BACKUPS_DIR = "backups"
CONFIG_NAME = "config.yaml"
DUMP_NAME = "state.pgdump"  # state.db on PostgreSQL: pg_dump's custom format
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
    skipped_plugins: list[str] = field(default_factory=list)  # plugin code left out


def default_path(home: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return home / BACKUPS_DIR / f"hermes-backup-{stamp}.tar.gz"


def _kept(relative: PurePosixPath) -> bool:
    first, name = relative.parts[0], relative.name
    if first.startswith((STAGING_PREFIX, ASIDE_PREFIX)):  # a restore's own scratch
        return False
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
    *,
    database: str | None = None,
) -> Summary:
    """Write one archive of `home` to `target` (default: HERMES_HOME/backups/...).
    `extra`: files outside the home that belong to it (a memory provider's
    `backup_paths`), archived under external/ with where they came from; a restore puts
    them in HERMES_HOME/external/ (an archive never writes outside the home) and names
    their original places (`Summary.external`). `database`: the PostgreSQL URL (with
    its password) when state.db lives there: its snapshot is pg_dump's (DUMP_NAME)."""
    target = target or default_path(home)
    _check_target(home, target)
    with tempfile.TemporaryDirectory(prefix="hermes-backup-") as scratch:
        entries = _snapshot_state(home, Path(scratch), database)
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


def _check_target(home: Path, target: Path) -> None:
    if target.exists():
        raise BackupError(f"{target} already exists: choose another path")
    if not target.parent.is_dir():
        if target.parent == home / BACKUPS_DIR:
            ensure_private_dir(target.parent)
        else:
            what = "is not a folder" if target.parent.exists() else "does not exist"
            raise BackupError(
                f"{target.parent} {what}: create it (owned by the user Hermes runs as) "
                "or choose another path"
            )


def _snapshot_state(home: Path, scratch: Path, database: str | None) -> list[tuple[str, Path]]:
    """state.db's consistent snapshot as the archive's first entry (none yet: nothing)."""
    if database is not None:
        dumped = scratch / DUMP_NAME
        try:
            postgres.dump(database, dumped, child_environment())
        except StateDBError as exc:
            raise BackupError(f"cannot back up the database: {exc}") from None
        return [(DUMP_NAME, dumped)]
    if not (home / STATE_DB_FILENAME).exists():
        return []
    snapshot = scratch / STATE_DB_FILENAME
    db = SessionDB.open(home)
    try:
        db.upkeep.snapshot(snapshot)
    finally:
        db.close()
    return [(STATE_DB_FILENAME, snapshot)]


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
    """The manifest, once every member is checked against it; BackupError otherwise.
    Members are hashed as they stream by (never read whole), and every size is bounded
    before anything is read: the manifest by MAX_MANIFEST_BYTES, a member by its listed
    size, the count by MAX_MEMBERS."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            manifest, listed, seen = None, {}, set()
            for count, member in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise BackupError(f"{archive}: more than {MAX_MEMBERS:,} members")
                if member.name == MANIFEST and manifest is None:
                    manifest = _manifest(tar, member)
                    listed = {str(f["path"]): f for f in manifest["files"]}
                    continue
                expected = listed.get(member.name)
                if (
                    expected is None
                    or member.name in seen
                    or not member.isfile()
                    or not _safe(member.name)
                ):
                    raise BackupError(f"{archive}: unexpected member {member.name!r}")
                if member.size != expected["size"]:
                    raise BackupError(f"{archive}: {member.name} does not match its checksum")
                if _digest(tar, member) != expected["sha256"]:
                    raise BackupError(f"{archive}: {member.name} does not match its checksum")
                seen.add(member.name)
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        raise BackupError(f"{archive}: not a readable Hermes backup ({exc})") from None
    if manifest is None:
        raise BackupError("no valid manifest.json: not a Hermes backup")
    missing = sorted(set(listed) - seen)
    if missing:
        raise BackupError(f"{archive}: incomplete, missing {', '.join(missing[:5])}")
    _check_layout(archive, listed)
    return manifest


def _digest(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    handle = tar.extractfile(member)
    assert handle is not None
    digest = hashlib.sha256()
    while chunk := handle.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def _check_layout(archive: Path, listed: dict[str, Any]) -> None:
    """No listed file is also a folder of another (a file where a folder should be)."""
    folders = {str(parent) for name in listed for parent in PurePosixPath(name).parents}
    clash = sorted(folders & set(listed))
    if clash:
        raise BackupError(f"{archive}: {clash[0]!r} is listed both as a file and as a folder")


def _manifest(tar: tarfile.TarFile, member: tarfile.TarInfo) -> dict[str, Any]:
    if not member.isfile() or member.size > MAX_MANIFEST_BYTES:
        raise BackupError("manifest.json is not a small file: not a Hermes backup")
    try:
        handle = tar.extractfile(member)
        assert handle is not None
        manifest = json.loads(handle.read())
    except (ValueError, AssertionError):
        raise BackupError("no valid manifest.json: not a Hermes backup") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"unknown backup format {manifest.get('format')!r}")
    files = manifest.get("files")
    if not isinstance(files, list) or not all(
        isinstance(f, dict)
        and isinstance(f.get("path"), str)
        and isinstance(f.get("size"), int)
        and isinstance(f.get("sha256"), str)
        for f in files
    ):
        raise BackupError("manifest.json lists its files in an unknown shape")
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
    archive: Path,
    home: Path,
    force: bool = False,
    progress: Progress | None = None,
    *,
    with_plugins: bool = False,
    database: str | None = None,
) -> Summary:
    """Replace `home`'s data with the archive's, after verifying all of it. The caller
    holds the home's instance lock (no gateway runs meanwhile).

    Nothing of the home changes until the whole archive is extracted into a staging
    folder inside the home and its databases pass SQLite's integrity check; then the
    home's data is moved aside and the staged data moved in, and any failure moves it
    all back. Plugin code (plugins/) is left out unless `with_plugins`: an archive
    never brings code that runs unless asked to (`Summary.skipped_plugins`).

    `database`: the home's PostgreSQL URL. An archive of a PostgreSQL home is restored
    into it, which must be empty (pg_restore, one transaction, before any file moves);
    an archive of a SQLite home needs a home without a database URL, and the reverse."""
    manifest = verify(archive)
    _check_database_target(manifest, database)
    # a home holding only its config.yaml is what the docs ask for before a restore (the
    # database it names), and the owner id a first command minted in it: nothing in it
    # is replaced unasked
    present = [name for name in has_data(home) if name not in (CONFIG_NAME, OWNER_ID_FILENAME)]
    if present and not force:
        shown = ", ".join(present[:4]) + (" ..." if len(present) > 4 else "")
        raise BackupError(
            f"{home} already holds data ({shown}): restoring would replace it; "
            "add --force to replace it (it is saved as a backup first)"
        )
    ensure_private_dir(home)
    files = [f for f in manifest["files"] if with_plugins or not _plugin(str(f["path"]))]
    skipped = [str(f["path"]) for f in manifest["files"] if f not in files]
    staging = home / f"{STAGING_PREFIX}{_stamp()}"
    try:
        _stage(archive, staging, files, progress)
        _check_databases(staging)
        if database is not None and (staging / DUMP_NAME).exists():
            _keep_database_config(home, staging)
            _load_database(database, staging / DUMP_NAME)
        saved = None
        if present:
            saved = create(home, home / BACKUPS_DIR / f"pre-restore-{_stamp()}.tar.gz").path
        _swap(home, staging, keep_plugins=not with_plugins)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    size = sum(int(f["size"]) for f in files)
    external = {str(home / f["path"]): str(f["origin"]) for f in files if f.get("origin")}
    return Summary(archive, len(files), size, str(manifest["created_at"]), saved, external, skipped)


def _check_database_target(manifest: dict[str, Any], database: str | None) -> None:
    names = {str(f["path"]) for f in manifest["files"]}
    if DUMP_NAME in names and database is None:
        raise BackupError(
            "this archive holds a PostgreSQL database: set database.url (and "
            "database.password_env) in this home's config.yaml to an empty database first"
        )
    if STATE_DB_FILENAME in names and database is not None:
        raise BackupError(
            "this archive holds a SQLite state.db but this home's database is PostgreSQL: "
            "restore it into a home without database.url"
        )
    if database is not None:
        try:
            empty = postgres.untouched(database)
        except Exception as exc:
            raise BackupError(f"cannot reach the database: {exc}") from None
        if not empty:
            raise BackupError(
                f"the database {redact(database)} already holds data: a restore goes into "
                "an empty database (create one, point database.url at it); nothing was changed"
            )


def _keep_database_config(home: Path, staging: Path) -> None:
    """The restored config.yaml keeps this home's `database:` (the archive's names the
    database it was taken from, which may be another server's)."""
    if not (staging / CONFIG_NAME).exists():
        return
    try:
        section = load_config(home).database.model_dump()
        update_config(staging, {("database", key): value for key, value in section.items()})
    except ConfigError as exc:
        raise BackupError(f"the archive's config.yaml cannot be used: {exc}") from None


def _load_database(database: str, dump: Path) -> None:
    try:
        postgres.clear(database)  # what opening it wrote (untouched: nothing of anyone's)
        postgres.load(database, dump, child_environment())
        SessionDB(dump.with_name(STATE_DB_FILENAME), url=database).close()  # opens, migrates
    except StateDBError as exc:
        raise BackupError(
            f"the database could not be restored: {exc}; nothing was changed"
        ) from None
    dump.unlink()  # in the database now; never a file of the home


def _plugin(name: str) -> bool:
    return PurePosixPath(name).parts[0] == PLUGINS_DIR


def _stage(
    archive: Path, staging: Path, files: list[dict[str, Any]], progress: Progress | None
) -> None:
    """Extract the listed files into `staging` (folders 0700, files 0600)."""
    wanted = {str(f["path"]) for f in files}
    ensure_private_dir(staging)
    done = 0
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            for member in tar:
                if member.name not in wanted:
                    continue
                destination = staging / member.name  # external files too: in the home
                for folder in reversed(destination.relative_to(staging).parents[:-1]):
                    ensure_private_dir(staging / folder)
                handle = tar.extractfile(member)
                assert handle is not None
                fd = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(handle, out)
                    out.flush()
                    os.fsync(out.fileno())
                done += 1
                if progress:
                    progress(done, len(files))
    except (OSError, tarfile.TarError, EOFError, zlib.error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise BackupError(
            f"{archive}: cannot be extracted ({reason}); nothing was changed"
        ) from None


def _check_databases(staging: Path) -> None:
    """state.db, and every other file of the archive that is SQLite, opens and passes
    quick_check; state.db also has Hermes's tables. A file that is not a database never
    replaces state.db (a provider's own files may be in any format)."""
    state = staging / STATE_DB_FILENAME
    for path in sorted(staging.rglob("*.db")):
        with path.open("rb") as head:
            if path != state and head.read(16) != b"SQLite format 3\x00":
                continue
        why = check_file(path, tables=("sessions", "messages") if path == state else ())
        if why is not None:
            raise BackupError(f"{path.relative_to(staging)} in the archive is {why}")


def _swap(home: Path, staging: Path, *, keep_plugins: bool) -> None:
    """Move the home's data aside and the staged data in; on any failure, put every
    moved entry back where it was."""
    aside = home / f"{ASIDE_PREFIX}{_stamp()}"
    ensure_private_dir(aside)
    moved: list[tuple[Path, Path]] = []  # (from, to), undone in reverse
    try:
        for name in (*(STATE_DB_FILENAME + s for s in ("-wal", "-shm")),):
            if (home / name).exists():
                _move(home / name, aside / name, moved)
        for child in sorted(home.iterdir()):
            if _replaced(child, keep_plugins):
                _move(child, aside / child.name, moved)
        for child in sorted(staging.iterdir()):
            _move(child, home / child.name, moved)
    except OSError as exc:
        undone = 0
        for source, target in reversed(moved):
            with contextlib.suppress(OSError):
                os.replace(target, source)
                undone += 1
        if undone < len(moved):
            raise BackupError(
                f"cannot move the restored data into {home} ({exc}), and not all of the "
                f"home's former data could be put back: what is missing is in {aside}"
            ) from None
        aside.rmdir()
        raise BackupError(
            f"cannot move the restored data into {home} ({exc}); nothing was changed"
        ) from None
    shutil.rmtree(aside, ignore_errors=True)


def _replaced(child: Path, keep_plugins: bool) -> bool:
    """Whether a top-level entry of the home is data a restore replaces."""
    name = child.name
    if name in SKIPPED_NAMES or name.startswith((STAGING_PREFIX, ASIDE_PREFIX)):
        return False
    if keep_plugins and name == PLUGINS_DIR:
        return False
    if child.is_dir() and not child.is_symlink():
        return True
    return name == STATE_DB_FILENAME or _kept(PurePosixPath(name))


def _move(source: Path, target: Path, moved: list[tuple[Path, Path]]) -> None:
    os.replace(source, target)
    moved.append((source, target))


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def _version() -> str:
    try:
        return metadata.version("hermes-gateway")
    except metadata.PackageNotFoundError:
        return "unknown"


__all__ = ["BackupError", "Summary", "create", "default_path", "has_data", "restore", "verify"]
