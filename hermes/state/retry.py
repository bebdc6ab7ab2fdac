"""Errors of state.db and the patience of a write that meets other writers: shared by
both backends (hermes/state/engine.py, hermes/state/postgres.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from hermes.backoff import Backoff


class StateDBError(Exception):
    """state.db cannot be used; the message says why."""


class DatabaseBusyError(StateDBError):
    pass


class DatabaseUnavailableError(StateDBError):
    """The database server is not there yet (not answering, starting up, its name not
    resolving): not a mistake in the configuration, so waiting may mend it."""


def is_locked(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "database is locked" in text or "database is busy" in text


class Patience:
    """Jittered, doubling waits between attempts of a write that met other writers (the
    database locked; on PostgreSQL a serialization failure), within `patience`."""

    def __init__(
        self,
        patience: float,
        retryable: Callable[[BaseException], bool] = is_locked,
        busy: str = "state.db stayed locked for over {s:g} s; try again",
    ) -> None:
        self.patience, self.retryable, self.busy = patience, retryable, busy
        self.deadline = time.monotonic() + patience
        self.waits = Backoff(first=0.005, cap=0.25, jitter=0.5)

    def wait(self, exc: Exception) -> None:
        """Sleep before the next attempt; re-raise `exc` if it is not worth retrying,
        give up with DatabaseBusyError when the patience is spent."""
        if not self.retryable(exc):
            raise exc
        if time.monotonic() + self.waits.peek() > self.deadline:
            raise DatabaseBusyError(self.busy.format(s=self.patience)) from exc
        time.sleep(self.waits.next())


__all__ = ["DatabaseBusyError", "Patience", "StateDBError", "is_locked"]
