"""One gateway per HERMES_HOME: `$HERMES_HOME/gateway.lock`, flocked for the process's
life, holds the pid of the gateway that has it. A second `hermes gateway run` finds it
taken and says which process runs, instead of failing later on a port or a platform
that allows one poller."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILENAME = "gateway.lock"


class AlreadyRunningError(Exception):
    pass


class InstanceLock:
    def __init__(self, home: Path) -> None:
        self.path = home / LOCK_FILENAME
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            held = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise AlreadyRunningError(
                f"a gateway is already running for {self.path.parent} (pid {held}); stop it "
                "first (systemctl stop hermes-gateway, or kill that pid) or use another HERMES_HOME"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock; the stale pid says nothing
            self._fd = None
