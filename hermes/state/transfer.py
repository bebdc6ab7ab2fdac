"""Export and import of conversations as JSONL (one message per line, OpenAI shape).

Each line: {"session_id", "platform", "chat_type", "chat_id", "thread_id", "title",
"started_at", "role", "content", "tool_calls", "tool_call_id", "tool_name",
"platform_message_id", "created_at"}. Only "session_id", "role" and "content" are
required on import, so any JSONL of OpenAI-shape messages with session ids loads.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.models import ChatSession, Message, as_utc

ROLES = {"system", "user", "assistant", "tool"}
CHAT_TYPES = {"dm", "group", "channel", "thread"}


class TransferError(ValueError):
    """A line that cannot be imported; nothing from the file was stored."""


def export_lines(chat: ChatSession, messages: Iterable[Message]) -> Iterator[str]:
    for message in messages:
        yield json.dumps(
            {
                "session_id": chat.id,
                "platform": chat.platform,
                "chat_type": chat.chat_type,
                "chat_id": chat.chat_id,
                "thread_id": chat.thread_id,
                "title": chat.title,
                "started_at": chat.started_at.isoformat(),
                "role": message.role,
                "content": message.content,
                "tool_calls": json.loads(message.tool_calls) if message.tool_calls else None,
                "tool_call_id": message.tool_call_id,
                "tool_name": message.tool_name,
                "platform_message_id": message.platform_message_id,
                "created_at": message.created_at.isoformat(),
            },
            ensure_ascii=False,
        )


def export_markdown(chat: ChatSession, messages: Iterable[Message]) -> str:
    lines = [
        f"# {chat.title or chat.id}",
        "",
        f"- session: `{chat.id}`",
        f"- platform: {chat.platform} ({chat.chat_type})",
        f"- started: {chat.started_at:%Y-%m-%d %H:%M} UTC",
        "",
    ]
    for message in messages:
        if message.role in ("user", "assistant") and message.content:
            lines += [f"**{message.role}** ({message.created_at:%H:%M}):", "", message.content, ""]
    return "\n".join(lines)


@dataclass
class _PendingSession:
    platform: str = "import"
    chat_type: str = "dm"
    chat_id: str = ""
    thread_id: str | None = None
    started_at: datetime | None = None
    messages: list[NewMessage] = field(default_factory=list)


@dataclass
class Parsed:
    sessions: dict[str, _PendingSession] = field(default_factory=dict)
    memory: list[tuple[str, str]] = field(default_factory=list)  # (target, entry)


def memory_lines(target: str, entries: Iterable[str]) -> Iterator[str]:
    """`--with-memory`: one line per memory entry, after the messages."""
    for entry in entries:
        yield json.dumps({"type": "memory", "target": target, "content": entry}, ensure_ascii=False)


def parse_jsonl(lines: Iterable[str]) -> Parsed:
    """Validate a whole file first, so a bad line stores nothing."""
    parsed = Parsed()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if isinstance(record, dict) and record.get("type") == "memory":
                parsed.memory.append(_memory_record(record))
            else:
                _add_record(parsed.sessions, record)
        except (ValueError, TypeError, KeyError) as exc:
            raise TransferError(f"line {number}: {exc}") from None
    return parsed


def _memory_record(record: dict[str, Any]) -> tuple[str, str]:
    target, content = record.get("target"), record.get("content")
    if target not in ("memory", "user") or not isinstance(content, str) or not content.strip():
        raise ValueError("a memory line needs target 'memory' or 'user' and a text content")
    content.encode("utf-8")
    return str(target), content


def _add_record(sessions: dict[str, _PendingSession], record: Any) -> None:
    if not isinstance(record, dict):
        raise ValueError("each line must be a JSON object")
    session_id = str(record["session_id"])
    role = record["role"]
    if role not in ROLES:
        raise ValueError(f"role must be one of {sorted(ROLES)}, got {role!r}")
    content = record.get("content") or ""
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)  # multi-part OpenAI content
    content.encode("utf-8")  # lone surrogates from escaped JSON are refused here
    pending = sessions.setdefault(session_id, _PendingSession())
    if not pending.messages:
        pending.platform = str(record.get("platform") or "import")
        chat_type = record.get("chat_type") or "dm"
        pending.chat_type = chat_type if chat_type in CHAT_TYPES else "dm"
        pending.chat_id = str(record.get("chat_id") or "")
        pending.thread_id = record.get("thread_id")
        pending.started_at = _time(record.get("started_at") or record.get("created_at"))
    pending.messages.append(
        NewMessage(
            role=role,
            content=content,
            tool_calls=record.get("tool_calls"),
            tool_call_id=record.get("tool_call_id"),
            tool_name=record.get("tool_name"),
            platform_message_id=None,
            created_at=_time(record.get("created_at")),
        )
    )


def _time(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    return as_utc(datetime.fromisoformat(str(value)))


SESSION_ID = re.compile(r"[\w.:-]{1,64}")


@dataclass(frozen=True, slots=True)
class ImportReport:
    sessions: int  # sessions in the file
    new_sessions: int  # of which were not in state.db yet
    stored: int  # messages stored
    skipped: int  # messages already there (an import run twice changes nothing)


def import_sessions(
    db: SessionDB,
    user_id: str,
    sessions: dict[str, _PendingSession],
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Store parsed sessions under `user_id`, keeping their ids. A session already there
    (imported before, or exported from this database) gets only the messages it does not
    have yet, so importing the same file twice stores nothing the second time."""
    new_sessions = stored = skipped = 0
    for done, (source_id, pending) in enumerate(sessions.items(), 1):
        session_id = _target_id(db, user_id, source_id)
        existing = db.conversations.get_session(session_id, user_id)
        have: Counter[tuple[str, str]] = Counter()
        if existing is None:
            db.conversations.start_session(
                user_id,
                pending.platform,
                f"import:{source_id}",
                session_id=session_id,
                chat_type=pending.chat_type,
                chat_id=pending.chat_id,
                thread_id=pending.thread_id,
                started_at=pending.started_at,
            )
            new_sessions += 1
        else:
            have.update((m.role, m.content) for m in db.conversations.messages(session_id, user_id))
        missing = []
        for message in pending.messages:
            key = (message.role, message.content)
            if have[key] > 0:
                have[key] -= 1
                skipped += 1
            else:
                missing.append(message)
        if missing:
            ids = db.conversations.add_messages(session_id, missing)
            stored += sum(1 for i in ids if i is not None)
        if progress:
            progress(done, len(sessions))
    return ImportReport(len(sessions), new_sessions, stored, skipped)


def _target_id(db: SessionDB, user_id: str, source_id: str) -> str:
    """The source id when it is a plain id that is free or this user's own; otherwise an
    id derived from both (stable, so a second import finds the first one's session)."""
    if SESSION_ID.fullmatch(source_id):
        if db.conversations.get_session(source_id, user_id) is not None:
            return source_id
        if not db.conversations.session_taken(source_id):
            return source_id
    digest = hashlib.sha256(f"{user_id}\0{source_id}".encode()).hexdigest()[:16]
    return f"s_{digest}"
