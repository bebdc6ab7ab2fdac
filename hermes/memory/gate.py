"""The gate between memory writes and merges of people.

Every change of a person's memory through the memory service (the tool, forget, undo)
passes the gate shared; linking two people passes it exclusively, from redeeming the
code to the user merge in state.db. So a merge never reads a store that a write is
changing, two merges never interleave (a chain X<-Y while Y<-Z runs one after the
other), and a write that waited for a merge finds its person's surviving id (state.db
keeps an alias for every merged-away id) and writes there.

The gate is a flock on `memories/.gate.lock`, so it holds across processes (the CLI and
the gateway) and across threads (each holder opens its own descriptor). With the stores
in a PostgreSQL database (several gateways, maybe on several machines, one database),
it is an advisory lock there instead (`database_gate`). Never pass it twice in one
thread: a shared hold inside an exclusive one waits for itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hermes.identity import ensure_private_dir
from hermes.memory.store import LOCK_TIMEOUT_S, StoreBusyError, io_error, wait_for_flock
from hermes.state.memory_stores import GateBusyError, MemoryStoresDB

GATE_FILE = ".gate.lock"


@contextmanager
def memory_gate(
    home: Path, *, exclusive: bool = False, timeout: float = LOCK_TIMEOUT_S
) -> Iterator[None]:
    folder = home / "memories"
    try:
        ensure_private_dir(home)
        ensure_private_dir(folder)
        fd = os.open(folder / GATE_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise io_error(folder / GATE_FILE, exc) from None
    try:
        if not wait_for_flock(fd, timeout, shared=not exclusive):
            raise _busy(exclusive, timeout)
        yield
    finally:
        os.close(fd)


@contextmanager
def database_gate(
    stores: MemoryStoresDB, *, exclusive: bool = False, timeout: float = LOCK_TIMEOUT_S
) -> Iterator[None]:
    try:
        with stores.gate(exclusive=exclusive, timeout=timeout):
            yield
    except GateBusyError:
        raise _busy(exclusive, timeout) from None


def _busy(exclusive: bool, timeout: float) -> StoreBusyError:
    what = "another change of memory" if exclusive else "a merge of linked accounts"
    return StoreBusyError(f"memory is busy with {what} for over {timeout:g} s; try again")
