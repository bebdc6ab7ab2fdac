"""`$HERMES_HOME/gateway.json`: what a running gateway tells `hermes gateway status`.

Written when the gateway has started, removed when it stops. A file whose process is
gone (a crash, a SIGKILL) is reported as stale, not as a running gateway.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

STATUS_FILENAME = "gateway.json"


@dataclass(frozen=True, slots=True)
class GatewayStatus:
    pid: int
    started_at: datetime
    platforms: dict[str, str]
    http: str
    running: bool  # False: the process that wrote the file is gone


def write_status_file(
    home: Path, platforms: dict[str, str], http: str = "", *, started_at: datetime
) -> None:
    """`started_at`: when the gateway started (every rewrite keeps it: uptime)."""
    data = {
        "pid": os.getpid(),
        "started_at": started_at.isoformat(),
        "platforms": platforms,
        "http": http,
    }
    temp = home / f".{STATUS_FILENAME}.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(temp, home / STATUS_FILENAME)


def remove_status_file(home: Path) -> None:
    path = home / STATUS_FILENAME
    status = read_status_file(home)
    if status is not None and status.pid == os.getpid():
        path.unlink(missing_ok=True)


def read_status_file(home: Path) -> GatewayStatus | None:
    try:
        data: Any = json.loads((home / STATUS_FILENAME).read_text(encoding="utf-8"))
        pid = int(data["pid"])
        started = datetime.fromisoformat(str(data["started_at"]))
        platforms = {str(k): str(v) for k, v in dict(data.get("platforms") or {}).items()}
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None  # a torn or foreign file says nothing reliable
    return GatewayStatus(pid, started, platforms, str(data.get("http") or ""), _alive(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
