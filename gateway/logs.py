"""Logging for the gateway process: level and format from config (`logging`), third-party
libraries quiet unless asked, and every secret redacted from every line.

httpx logs each request URL at INFO, and the Telegram Bot API puts the bot token in the
URL; a library's exception text can carry a header or a key. So the root handler runs
every record through `Redactor`, which replaces the values of the configured secret
variables (platform tokens, signing secrets, model API keys) and anything shaped like a
known token with `***`, in the message and in the formatted traceback alike.

Each turn runs under an id (`turn()`, set by the router around the turn's task; a
scheduled job under `job:<id>`, a reminder's delivery under `reminder:<id>`); every
record logged while it runs, by our code or a library's, carries it (`[turn t-…]` in text,
`"turn"` in JSON), so one `grep` gives a turn's whole story. Message bodies are never
logged at INFO: a turn's line names the platform, the chat and the person, not the text.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import functools
import json
import logging
import os
import re
import secrets
import socket
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gateway.config import HermesConfig, env_names, secret
from gateway.edge.platform_config import platforms
from hermes.state.models import LogRecord

if TYPE_CHECKING:
    from hermes.state.db import SessionDB

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(turn_tag)s: %(message)s"
RECENT_CAPACITY = 2000  # lines kept for the dashboard
OURS = frozenset({"gateway", "hermes", "adapters", "__main__"})
MASK = "***"
# shapes of secrets masked wherever they appear: model API keys and bearer tokens here,
# each platform's own tokens from its package (`Platform.log_secrets`)
_GENERAL_SHAPES = (r"\bsk-[\w-]{16,}", r"(?i:bearer)\s+[\w.~+/-]{16,}=*")


@functools.cache
def secret_shapes() -> re.Pattern[str]:
    """What a platform's token, an API key or a bearer credential looks like."""
    platform_shapes = [p.log_secrets for p in platforms().values() if p.log_secrets]
    return re.compile("|".join(f"(?:{shape})" for shape in (*platform_shapes, *_GENERAL_SHAPES)))


_TURN: contextvars.ContextVar[str] = contextvars.ContextVar("hermes_turn", default="")


@contextlib.contextmanager
def turn(named: str = "") -> Iterator[str]:
    """A new turn id for everything logged inside (tasks created inside inherit it):
    `named` for work that has an id of its own (a scheduled job, a reminder's run),
    else a fresh one."""
    token = _TURN.set(named or f"t-{secrets.token_hex(4)}")
    try:
        yield _TURN.get()
    finally:
        _TURN.reset(token)


def process_name() -> str:
    """This process as the dashboard names an instance ("host:pid"): on its kept log
    lines, its job runs, its claims of reminders and confirmations."""
    return f"{socket.gethostname()}:{os.getpid()}"


class TurnTag(logging.Filter):
    """Puts the current turn's id on the record (`record.turn`, empty outside a turn)."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = _TURN.get()
        record.__dict__["turn"] = current
        record.__dict__["turn_tag"] = f" [turn {current}]" if current else ""
        return True


def secret_values(config: HermesConfig, env: Mapping[str, str] | None = None) -> list[str]:
    """The values of every secret variable the config names (gateway/config.py
    `env_names`)."""
    return [value for name in env_names(config).values() if (value := secret(name, env))]


class Redactor(logging.Filter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        known = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)
        self._known = re.compile("|".join(re.escape(s) for s in known)) if known else None

    def redact(self, text: str) -> str:
        if self._known is not None:
            text = self._known.sub(MASK, text)
        return secret_shapes().sub(MASK, text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


class LevelGate(logging.Filter):
    """Our records pass at `ours` or above; those of libraries (httpx, the platform SDKs,
    APScheduler...) only at `theirs` or above."""

    def __init__(self, ours: int, theirs: int) -> None:
        super().__init__()
        self.ours, self.theirs = ours, theirs

    def filter(self, record: logging.LogRecord) -> bool:
        mine = record.name.split(".", 1)[0] in OURS
        return record.levelno >= (self.ours if mine else self.theirs)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.__dict__.get("turn"):
            entry["turn"] = record.__dict__["turn"]
        if record.exc_text:
            entry["error"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False)


def configure(
    config: HermesConfig, level: str | None = None, env: Mapping[str, str] | None = None
) -> None:
    """Set up the root logger for `hermes gateway run` (`level` overrides the config)."""
    settings = config.logging
    ours = logging.getLevelName((level or settings.level).upper())
    theirs = logging.getLevelName(settings.third_party.upper())
    handler = logging.StreamHandler(sys.stderr)
    if settings.format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    redactor = Redactor(secret_values(config, env))
    for each in (handler, RECENT, STORED):  # the same lines, redacted alike, in each
        each.filters.clear()
        each.addFilter(LevelGate(ours, theirs))
        each.addFilter(redactor)
        each.addFilter(TurnTag())
        root.addHandler(each)
    STORED.setLevel(min(settings.stored_levels(), default=logging.CRITICAL + 1))
    root.setLevel(min(ours, theirs))


class RecentLines(logging.Handler):
    """The last lines the process logged, in memory, for the dashboard's Logs page
    (journald or the container runtime keeps the whole log)."""

    def __init__(self, capacity: int = RECENT_CAPACITY) -> None:
        super().__init__()
        self.lines: collections.deque[LogLine] = collections.deque(maxlen=capacity)
        self.setFormatter(logging.Formatter(TEXT_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception:  # a record that cannot be formatted is not worth a traceback
            return
        turn_id = str(record.__dict__.get("turn", ""))
        self.lines.append(LogLine(record.created, record.levelno, turn_id, text))

    def last(
        self,
        limit: int,
        level: int = logging.NOTSET,
        turn_id: str = "",
        *,
        since: float = 0.0,
        text: str = "",
    ) -> list[LogLine]:
        """The newest `limit` lines at `level` or above, logged at `since` or later (a
        time.time()), of one turn and holding `text` (any case) when given."""
        folded = text.casefold()
        found = [
            line
            for line in list(self.lines)
            if line.level >= level
            and line.at >= since
            and (not turn_id or line.turn == turn_id)
            and (not folded or folded in line.text.casefold())
        ]
        return found[-limit:]


@dataclass(frozen=True, slots=True)
class LogLine:
    at: float  # time.time() of the record
    level: int
    turn: str
    text: str


class StoredLog(logging.Handler):
    """The lines worth keeping (warnings and errors by default: `logging.keep_days`) in
    state.db, for the dashboard: every instance's, across restarts. `emit` only queues
    (it runs wherever a line is logged, the event loop included); a thread of its own
    writes each second's lines in one transaction. Lines logged before the database is
    open wait for it (a bounded number); a database that fails keeps them for the next
    try, and lines logged by the writing itself are not stored (they would feed it)."""

    def __init__(self, capacity: int = 5000) -> None:
        super().__init__(logging.WARNING)
        self.capacity = capacity
        self._waiting: collections.deque[LogRecord] = collections.deque(maxlen=capacity)
        self._db: SessionDB | None = None
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._stop = False
        self.instance = process_name()
        self.failures = 0

    def emit(self, record: logging.LogRecord) -> None:
        if threading.current_thread() is self._writer:
            return
        message = record.getMessage()
        if record.exc_text:
            message += "\n" + record.exc_text
        self._waiting.append(
            LogRecord(
                at=datetime.fromtimestamp(record.created, UTC),
                level=record.levelno,
                logger=record.name,
                instance=self.instance,
                turn=str(record.__dict__.get("turn", "")),
                message=message,
            )
        )

    def attach(self, db: SessionDB) -> None:
        """Write to `db` from now on (what waited first)."""
        self.detach()
        self._db, self._stop = db, False
        self._writer = threading.Thread(target=self._run, name="hermes-stored-log", daemon=True)
        self._writer.start()

    def detach(self, timeout: float = 5.0) -> None:
        """Write what waits, then stop writing (before the database closes)."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        self._stop = True
        self._wake.set()
        writer.join(timeout)
        self._db = None

    def _run(self) -> None:
        while True:
            self._wake.wait(1.0)
            self._wake.clear()
            self._flush()
            if self._stop:
                return

    def _flush(self) -> None:
        db = self._db
        if db is None or not self._waiting:
            return
        batch = [self._waiting.popleft() for _ in range(min(len(self._waiting), 500))]
        try:
            db.logs.add(batch)
        except Exception as exc:  # kept for the next second's try, newest first dropped
            self.failures += 1
            if self.failures == 1 or self.failures % 600 == 0:
                print(f"hermes: log lines not stored in state.db: {exc!r}", file=sys.stderr)
            room = self.capacity - len(self._waiting)
            self._waiting.extendleft(reversed(batch[:room]))
        else:
            self.failures = 0
            if self._waiting:
                self._wake.set()


RECENT = RecentLines()
STORED = StoredLog()


__all__ = [
    "RECENT",
    "STORED",
    "JsonFormatter",
    "LevelGate",
    "LogLine",
    "RecentLines",
    "Redactor",
    "StoredLog",
    "TurnTag",
    "configure",
    "secret_values",
    "turn",
]
