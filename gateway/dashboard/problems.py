"""What is wrong now, for the banner on every dashboard page and the Status page: a
platform not connected, a scheduler job whose last run failed or that is paused, errors and warnings
logged in the last hour (state.db's `log_records`, every instance's), little disk left.
Read off the event loop, for each page (three small indexed reads)."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gateway.config import HermesConfig
from gateway.scheduler import read_status
from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)
WINDOW = timedelta(hours=1)  # "recent" errors and warnings
LOW_DISK_BYTES = 1_000_000_000
LOW_DISK_SHARE = 0.05
BAD_STATES = ("failed", "reconnecting", "lost")


@dataclass(frozen=True, slots=True)
class Problem:
    severity: str  # "error" or "warning"
    text: str
    link: str  # the dashboard page (and query) that says more


def bad_state(state: str) -> bool:
    """A platform's connection state that is an outage (not a start, a standby)."""
    return state.startswith(BAD_STATES)


class Problems:
    def __init__(self, home: Path, config: HermesConfig, db: SessionDB, runtime: Any) -> None:
        self.home, self.config, self.db, self.runtime = home, config, db, runtime

    def now(self) -> list[Problem]:
        """What is wrong; a part that cannot be read (damaged storage) is itself one,
        never an error page in place of the page asked for."""
        try:
            return self._find()
        except Exception as exc:
            logger.exception("dashboard: the problems could not be read")
            text = f"What is wrong could not be read ({type(exc).__name__}): the log says why"
            return [Problem("error", text, "/status")]

    def _find(self) -> list[Problem]:
        found: list[Problem] = []
        states = self.runtime.adapter_states() if self.runtime is not None else {}
        for name, state in sorted(states.items()):
            if bad_state(state):
                found.append(Problem("error", f"{name}: {state}", "/status#platforms"))
        for job in read_status(self.home, self.config, self.db):
            if job.paused_at is not None:
                text = f"The {job.id} job is paused (since {job.paused_at:%Y-%m-%d %H:%M} UTC)"
                found.append(Problem("warning", text, "/scheduler"))
            if job.last_ok is False:
                when = f"{job.last_run:%H:%M} UTC" if job.last_run else "its last run"
                text = f"The {job.id} job failed at {when}: {job.last_result}"
                found.append(Problem("error", text, f"/scheduler?job={job.id}"))
        since = datetime.now(UTC) - WINDOW
        by_level: dict[int, list[Any]] = {}
        for source in self.db.logs.sources(since, logging.WARNING):
            by_level.setdefault(min(source.level, logging.ERROR), []).append(source)
        for level, sources in sorted(by_level.items(), reverse=True):
            word = "error" if level >= logging.ERROR else "warning"
            count = sum(s.count for s in sources)
            top = sources[0]
            first_line = top.last_message.splitlines()[0][:160] if top.last_message else ""
            text = (
                f"{count} {word}{'' if count == 1 else 's'} logged in the last hour "
                f"(most from {top.logger}: {first_line})"
            )
            found.append(Problem(word, text, f"/logs?level={word}&since=1h"))
        disk = shutil.disk_usage(self.home)
        if disk.free < LOW_DISK_BYTES or disk.free < disk.total * LOW_DISK_SHARE:
            text = f"Little disk left: {disk.free / 1e9:.1f} GB free of {disk.total / 1e9:.1f} GB"
            found.append(Problem("error", text, "/status#parts"))
        return found


__all__ = ["Problem", "Problems", "bad_state"]
