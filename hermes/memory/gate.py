"""The gate between memory writes and merges of people, one per person.

Every change of a person's memory through the memory service (the tool, forget, undo)
passes that person's gate shared; linking two people passes both their gates
exclusively (in sorted order: two links never wait for each other in a circle), from
redeeming the code to the user merge in state.db. So a merge never reads a store that a
write is changing, two merges of the same person never interleave (a chain X<-Y while
Y<-Z runs one after the other), and a write that waited for a merge finds its person's
surviving id (state.db keeps an alias for every merged-away id) and passes the
survivor's gate before it writes there. Writes and links of other people never wait.

A person's gate is a flock on `memories/.gates/<user id>.lock`, so it holds across
processes (the CLI and the gateway) and across threads (each holder opens its own
descriptor). With the stores in a PostgreSQL database (several gateways, maybe on
several machines, one database), it is an advisory lock there instead
(`database_gate`). Never pass a person's gate twice in one thread: a shared hold inside
an exclusive one waits for itself.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from hermes.identity import ensure_private_dir, validate_user_id
from hermes.memory.store import LOCK_TIMEOUT_S, StoreBusyError, io_error, wait_for_flock
from hermes.state.memory_stores import GateBusyError, MemoryStoresDB

GATES = ".gates"  # memories/.gates/<user id>.lock


@contextmanager
def memory_gate(
    home: Path,
    user_ids: Sequence[str],
    *,
    exclusive: bool = False,
    timeout: float = LOCK_TIMEOUT_S,
) -> Iterator[None]:
    """These people's gates (see the module), each a lock file, taken in sorted order."""
    folder = home / "memories" / GATES
    try:
        ensure_private_dir(home)
        ensure_private_dir(home / "memories")
        ensure_private_dir(folder)
    except OSError as exc:
        raise io_error(folder, exc) from None
    with contextlib.ExitStack() as held:
        for user_id in sorted(set(user_ids)):
            path = folder / f"{validate_user_id(user_id)}.lock"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:
                raise io_error(path, exc) from None
            held.callback(os.close, fd)
            if not wait_for_flock(fd, timeout, shared=not exclusive):
                raise _busy(exclusive, timeout)
        yield


@contextmanager
def database_gate(
    stores: MemoryStoresDB,
    user_ids: Sequence[str],
    *,
    exclusive: bool = False,
    timeout: float = LOCK_TIMEOUT_S,
) -> Iterator[None]:
    try:
        with stores.gate(user_ids, exclusive=exclusive, timeout=timeout):
            yield
    except GateBusyError:
        raise _busy(exclusive, timeout) from None


def _busy(exclusive: bool, timeout: float) -> StoreBusyError:
    what = "another change of memory" if exclusive else "a merge of linked accounts"
    return StoreBusyError(f"memory is busy with {what} for over {timeout:g} s; try again")
