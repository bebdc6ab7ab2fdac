"""Where an entry came from: every recorded change that mentions it, each with the
conversation and the message behind it. One answer for `/memory why`, `hermes memory
why` and its --json (each only renders it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from hermes.state.db import SessionDB


@dataclass(frozen=True, slots=True)
class Source:
    session_id: str
    platform: str
    started_at: datetime
    title: str
    message_role: str | None = None  # the message the change came from, when known
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Change:
    at: datetime
    action: str  # add, replace, remove, consolidate, drop, merge, undo, outside...
    target: str  # memory | user
    actor: str  # agent | user | admin | consolidator
    before: str | None
    after: str | None
    source: Source | None  # None: not from a conversation (the CLI, a hand edit)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["at"] = self.at.isoformat()
        if self.source is not None:
            data["source"]["started_at"] = self.source.started_at.isoformat()
        return data


def explain(db: SessionDB, user_id: str, text: str, limit: int | None = None) -> list[Change]:
    """The recorded changes of `user_id`'s memory that mention `text`, oldest first
    (the first `limit` of them)."""
    events = db.memory_log.memory_events(user_id, text)
    changes = []
    for event in events[:limit]:
        source = None
        chat = db.conversations.get_session(event.session_id, user_id) if event.session_id else None
        if chat is not None:
            message = (
                db.conversations.message(event.message_id, user_id) if event.message_id else None
            )
            source = Source(
                chat.id,
                chat.platform,
                chat.started_at,
                chat.title or "",
                message.role if message is not None else None,
                message.content if message is not None else None,
            )
        changes.append(
            Change(
                event.created_at,
                event.action,
                event.target,
                event.actor,
                event.entry_before,
                event.entry_after,
                source,
            )
        )
    return changes


__all__ = ["Change", "Source", "explain"]
