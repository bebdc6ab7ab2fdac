"""A reminder row as the `schedule` tool stores one: a person's, in their Telegram DM."""

from __future__ import annotations

from typing import Any

from hermes.state.models import Reminder
from hermes.state.reminders import new_reminder_id


def telegram_reminder(user_id: str, chat_id: str, text: str, **fields: Any) -> Reminder:
    """`fields`: due_at, cron, timezone (UTC unless given), id..."""
    values: dict[str, Any] = {
        "id": new_reminder_id(),
        "user_id": user_id,
        "owner_id": user_id,
        "platform": "telegram",
        "chat_id": chat_id,
        "chat_type": "dm",
        "session_key": f"telegram:dm:{chat_id}",
        "timezone": "UTC",
        "text": text,
        **fields,
    }
    return Reminder(**values)
