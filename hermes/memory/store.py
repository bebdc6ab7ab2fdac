"""One memory store file (MEMORY.md or USER.md) with serialized, atomic writes.

Writers take an exclusive `flock` on a sidecar `<file>.lock` (so the CLI and the
gateway, in different processes, never lose each other's updates), re-read the file
under the lock, write a temp file in the same folder, fsync it and `os.replace` it over
the original. Readers take no lock: `os.replace` is atomic, so they see the old file or
the new one, never a torn one.

Durability is the home's one level, the same as state.db's (WAL at synchronous=NORMAL):
a write survives a crash of any process the moment it returns; a power cut keeps every
file whole (the data is on disk before the rename) but may roll back the last writes of
its final moments, the store and its record alike. The folder is not fsynced after the
rename: that would make a write survive a power cut that its provenance in state.db
does not, at a fifth of the cost of a write.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from hermes.memory import entries as fmt

T = TypeVar("T")
LOCK_TIMEOUT_S = 10.0
_TEMP_PREFIX = ".tmp-"


class Target(StrEnum):
    MEMORY = "memory"
    USER = "user"

    @property
    def filename(self) -> str:
        return "MEMORY.md" if self is Target.MEMORY else "USER.md"

    @property
    def heading(self) -> str:
        return (
            "MEMORY (your personal notes)"
            if self is Target.MEMORY
            else ("USER PROFILE (who the user is)")
        )

    @property
    def noun(self) -> str:
        return "Memory" if self is Target.MEMORY else "User profile"


class StoreError(Exception):
    """A store that cannot be used as asked; the message says why and what to do."""


class StoreBusyError(StoreError):
    pass


class StoreIOError(StoreError):
    """The disk refused a write (full, read-only, no permission); nothing was changed."""


def io_error(path: Path, exc: OSError) -> StoreIOError:
    """One clear sentence for an OS error on a memory file, naming it and what to do."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        what, todo = "the disk is full", "Free space and try again."
    elif exc.errno == errno.EROFS:
        what = "the file system is read-only"
        todo = "Remount it read-write, or point HERMES_HOME at a writable folder."
    elif exc.errno in (errno.EACCES, errno.EPERM):
        what = "permission denied"
        todo = "Make the folder writable by the user Hermes runs as (the service user)."
    else:
        what, todo = exc.strerror or str(exc), "Check the disk and try again."
    return StoreIOError(f"cannot write {path}: {what}. Nothing was changed. {todo}")


class StoreDamagedError(StoreError):
    """The file on disk no longer round-trips; it was backed up and left untouched."""


@dataclass(frozen=True, slots=True)
class StoreState:
    """What one read of the file found."""

    entries: tuple[str, ...]
    limit: int
    damage: str | None = None  # why the file must not be rewritten, if it must not
    raw: str = ""  # the file's text as read (for exact undo)
    pending: tuple[str, ...] = ()  # entries of a merged account waiting for consolidation
    pending_raw: str = ""

    @property
    def used(self) -> int:
        return fmt.usage(self.entries)

    @property
    def percent(self) -> int:
        return self.used * 100 // self.limit

    def usage_line(self) -> str:
        waiting = f" (+{len(self.pending)} merged entries waiting)" if self.pending else ""
        return f"{self.percent}% — {self.used:,}/{self.limit:,} chars{waiting}"

    def with_pending(self) -> StoreState:
        """The entries and the waiting ones as one list: what consolidation works on."""
        if not self.pending:
            return self
        return replace(self, entries=self.entries + self.pending, pending=())


class Store:
    """What every memory store does, wherever its text lives: a file (MemoryStore,
    below) or a row of the database (db_store.py, with `memory.backend: database`).

    `mutate` and `compare_and_swap` run under the store's lock (the file's flock, or
    the database transaction holding the row); their hooks run there too, in this
    order: `before_check`/`decide` on the fresh state, `before_write` once the change
    is decided, `after_write` once the new text is in place (the journal records its
    intent, then completes it)."""

    target: Target
    limit: int
    where: str  # how messages name the store
    atomic = False  # whether a change commits in one transaction with its record

    def __init__(self, target: Target, limit: int) -> None:
        self.target, self.limit = target, limit
        # the last text read or written and its entries: a store that has not changed
        # since (the common case under the lock, after this process's own write) is not
        # parsed again
        self._parsed: tuple[str, tuple[str, ...]] = ("", ())

    def read(self) -> StoreState:
        raise NotImplementedError

    def mutate(
        self,
        decide: Callable[[StoreState], tuple[list[str] | None, T]],
        before_write: Callable[[T], None] | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> T:
        """Run `decide` on the current state under the lock; write what it returns.

        `decide` returns (new entries or None for no write, result); the entries in the
        form `read` gives them (stripped, unique, no separator line inside one: what
        parsing their text gives back), which is kept as the store's parse.
        `before_write` gets the result just before the text is replaced. A damaged store
        raises StoreDamagedError before `decide` is called."""
        raise NotImplementedError

    def compare_and_swap(
        self,
        expected: str,
        text: str,
        pending: tuple[str, str] | None = None,
        *,
        before_check: Callable[[StoreState], None] | None = None,
        before_write: Callable[[], None] | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> bool:
        """Write `text` only if the store still reads exactly `expected`; under the lock.

        With `pending` = (expected, new), the waiting entries must match too and are
        replaced in the same critical section ('' means none). `before_check` gets the
        store as read first, `before_write` runs once the comparison holds."""
        raise NotImplementedError

    def consolidation_claim(self) -> AbstractContextManager[bool]:
        """Non-blocking, across processes: yields False while another run holds it."""
        raise NotImplementedError

    def _state(self, text: str, pending_raw: str = "") -> StoreState:
        if self._parsed[0] == text:
            entries = self._parsed[1]
        else:
            entries = tuple(fmt.parse(text))
            self._parsed = (text, entries)
        used = fmt.usage(entries)
        damage = None
        if used > self.limit:
            shape = (
                "1 entry with no '§' separator lines"
                if len(entries) == 1
                else (f"{len(entries)} entries")
            )
            damage = f"it holds {used:,}/{self.limit:,} chars in {shape}"
        state = StoreState(entries, self.limit, damage, raw=text)
        if pending_raw:
            state = replace(state, pending=tuple(fmt.parse(pending_raw)), pending_raw=pending_raw)
        return state


class MemoryStore(Store):
    def __init__(
        self, path: Path, target: Target, limit: int, lock_timeout: float = LOCK_TIMEOUT_S
    ) -> None:
        super().__init__(target, limit)
        self.path = path
        self.where = str(path)
        self.lock_timeout = lock_timeout
        self.lock_path = path.with_name(path.name + ".lock")
        self._prepared = False  # the folder checked and old temps swept: once per store
        # entries from a merged account that did not fit; consolidation folds them in
        self.pending_path = path.with_name(path.name + ".pending")

    def read(self) -> StoreState:
        try:
            text = _read_bytes(self.path).decode("utf-8")
        except UnicodeDecodeError as exc:
            return StoreState((), self.limit, f"it is not valid UTF-8 (byte {exc.start})")
        return self._state(text, _read_text(self.pending_path))

    def mutate(
        self,
        decide: Callable[[StoreState], tuple[list[str] | None, T]],
        before_write: Callable[[T], None] | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> T:
        with self._io(), self._locked():
            state = self.read()
            if state.damage is not None:
                backup = self._backup()
                raise StoreDamagedError(_damage_message(self, state.damage, backup))
            new_entries, result = decide(state)
            if new_entries is not None:
                if before_write is not None:
                    before_write(result)
                text = fmt.serialize(new_entries)
                self._atomic_write(text)
                self._parsed = (text, tuple(new_entries))
                if after_write is not None:
                    after_write()
            return result

    def compare_and_swap(
        self,
        expected: str,
        text: str,
        pending: tuple[str, str] | None = None,
        *,
        before_check: Callable[[StoreState], None] | None = None,
        before_write: Callable[[], None] | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> bool:
        with self._io(), self._locked():
            if before_check is not None:
                before_check(self.read())
            try:
                current = _read_text(self.path)
                waiting = _read_text(self.pending_path)
            except UnicodeDecodeError:
                return False
            if current != expected or (pending is not None and waiting != pending[0]):
                return False
            if before_write is not None:
                before_write()
            if pending is not None and pending[1] != waiting:
                if pending[1]:
                    self._atomic_write(pending[1], self.pending_path)
                else:
                    self.pending_path.unlink(missing_ok=True)
            if text != current:
                self._atomic_write(text)
            if after_write is not None:
                after_write()
            return True

    @contextmanager
    def consolidation_claim(self) -> Iterator[bool]:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.path.with_name(self.path.name + ".consolidate.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def _ensure_dir(self) -> None:
        if self._prepared and self.path.parent.is_dir():
            return
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.stat().st_mode & 0o077:
            folder.chmod(0o700)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the store's lock (no other writer can change it) for a whole operation,
        such as a merge reading it and moving it away. Not reentrant: inside, use only
        `read`, never `mutate` or `compare_and_swap` of this store."""
        with self._io(), self._locked():
            yield

    @contextmanager
    def _io(self) -> Iterator[None]:
        """The folder exists; an OS error in what follows is a clear StoreIOError."""
        try:
            self._ensure_dir()
            yield
        except OSError as exc:
            raise io_error(Path(exc.filename) if exc.filename else self.path, exc) from None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if not wait_for_flock(fd, self.lock_timeout):
                raise StoreBusyError(
                    f"{self.path.name} is locked by another process for over "
                    f"{self.lock_timeout:g} s; try again"
                )
            if not self._prepared:
                self._remove_stale_temps()
                self._prepared = True
            yield
        finally:
            os.close(fd)  # closing the last descriptor of the file releases the lock

    def _remove_stale_temps(self) -> None:
        """Temps with a random suffix, from writers before temps had a fixed name."""
        for stale in self.path.parent.glob(f"{_TEMP_PREFIX}{self.path.name}.*"):
            stale.unlink(missing_ok=True)

    def _atomic_write(self, text: str, path: Path | None = None) -> None:
        # Temps are only written under the lock, so each file has one fixed temp name:
        # one left by a dead writer is simply overwritten (never followed if a link).
        path = path or self.path
        temp = path.with_name(_TEMP_PREFIX + path.name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
        fd = os.open(temp, flags, 0o600)
        try:
            try:
                data = memoryview(text.encode("utf-8"))
                while data:  # a short write (a full disk, a signal) is finished or fails
                    data = data[os.write(fd, data) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    def _backup(self) -> Path:
        """Copy the current file beside itself, once per distinct content."""
        raw = self.path.read_bytes()
        digest = hashlib.sha256(raw).hexdigest()[:8]
        existing = sorted(self.path.parent.glob(f"{self.path.name}.*-{digest}.bak"))
        if existing:
            return existing[0]
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        backup = self.path.with_name(f"{self.path.name}.{stamp}-{digest}.bak")
        fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        return backup


def _damage_message(store: MemoryStore, damage: str, backup: Path) -> str:
    return (
        f"{store.path} was edited outside Hermes and can no longer be updated safely: "
        f"{damage}. Nothing was changed; a copy was saved as {backup.name}. "
        f"To fix it, edit the file so that entries are separated by a line holding only "
        f"'§' and the whole file stays within {store.limit:,} chars (or delete the file), "
        f"then try again."
    )


def wait_for_flock(fd: int, timeout: float, *, shared: bool = False) -> bool:
    """Take a flock on `fd` (exclusive, or `shared`), waiting in the kernel for at most
    `timeout` s.

    The wait is a blocking flock in a helper thread, so waiters sleep in the kernel and
    are woken when the holder releases (polling with sleeps serves them unfairly). On a
    timeout the helper keeps waiting on a duplicate descriptor and lets go of the lock
    at once if it gets it, so a late grant never leaves the file locked.
    """
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True  # uncontended: no thread needed
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
    waiter = os.dup(fd)  # the same open file: a lock taken on it is the caller's lock
    granted = threading.Event()
    guard = threading.Lock()
    abandoned = False

    def wait() -> None:
        try:
            fcntl.flock(waiter, mode)
        except OSError:
            os.close(waiter)
            return
        with guard:
            if abandoned:
                fcntl.flock(waiter, fcntl.LOCK_UN)
                os.close(waiter)
                return
            granted.set()

    threading.Thread(target=wait, name="flock-wait", daemon=True).start()
    if granted.wait(timeout):
        os.close(waiter)  # the caller's descriptor still holds the lock
        return True
    with guard:
        if granted.is_set():
            os.close(waiter)
            return True
        abandoned = True
    return False


def _read_bytes(path: Path) -> bytes:
    """The whole file ('' if there is none), read with plain system calls: a store is a
    few KB, read on every write."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_text(path: Path) -> str:
    return _read_bytes(path).decode("utf-8")
