"""Tokens the model used, per person, per UTC day and per model (`usage_days`): added in
the same transaction as the reply they produced (hermes/state/conversations.py), read by
the dashboard's Usage page, which prices them (`llm.prices`). A link moves a person's
counts to the person who stays (`fold`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal, NamedTuple

from sqlalchemy import text
from sqlmodel import Session

from hermes.state import engine as eng
from hermes.state.models import utcnow


class Usage(NamedTuple):
    """One model call's tokens, and the model asked (its configured name)."""

    prompt: int
    completion: int
    model: str = ""


# the hot path's statement (both backends: `?` placeholders, one row per day, person, model)
ADD_USAGE = (
    "INSERT INTO usage_days (day, user_id, model, prompt_tokens, completion_tokens, calls) "
    "VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT (day, user_id, model) DO UPDATE SET "
    "prompt_tokens = usage_days.prompt_tokens + excluded.prompt_tokens, "
    "completion_tokens = usage_days.completion_tokens + excluded.completion_tokens, "
    "calls = usage_days.calls + 1"
)
# PostgreSQL's one-statement path: the same, as a step of hermes/state/conversations.py
# `_ADD_ONE` (the person from its `chat` step)
ADD_USAGE_STEP = (
    "used AS (INSERT INTO usage_days (day, user_id, model, prompt_tokens, completion_tokens, "
    "calls) SELECT ?, user_id, ?, ?, ?, 1 FROM chat WHERE ? "
    "ON CONFLICT (day, user_id, model) DO UPDATE SET "
    "prompt_tokens = usage_days.prompt_tokens + excluded.prompt_tokens, "
    "completion_tokens = usage_days.completion_tokens + excluded.completion_tokens, "
    "calls = usage_days.calls + 1)"
)
_FOLD = text(
    "INSERT INTO usage_days (day, user_id, model, prompt_tokens, completion_tokens, calls) "
    "SELECT day, :keep, model, prompt_tokens, completion_tokens, calls FROM usage_days "
    "WHERE user_id = :gone ON CONFLICT (day, user_id, model) DO UPDATE SET "
    "prompt_tokens = usage_days.prompt_tokens + excluded.prompt_tokens, "
    "completion_tokens = usage_days.completion_tokens + excluded.completion_tokens, "
    "calls = usage_days.calls + excluded.calls"
)


def today() -> str:
    return utcnow().strftime("%Y-%m-%d")


@dataclass(frozen=True, slots=True)
class Used:
    """Tokens of one day or one person (`key`), with one model."""

    key: str
    model: str
    prompt: int
    completion: int
    calls: int


class UsageDB:
    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience

    def add(self, user_id: str, usage: Usage, day: str | None = None) -> None:
        """Tokens of a model call made for `user_id` outside a reply (on `day`, default
        today): what a reply's own write does, on its own."""

        def work(raw: eng.RawConnection) -> None:
            raw.execute(ADD_USAGE, (day or today(), user_id, usage.model, *usage[:2]))

        eng.with_raw_retry(self.engine, work, self.patience, begin="APPEND")

    def totals(self, by: Literal["day", "person"], since: date, user_id: str = "") -> list[Used]:
        """Tokens from the day `since` on (UTC), added up per day or per person, and per
        model (each priced on its own); of one person, or everyone."""
        key = "day" if by == "day" else "user_id"
        mine = " AND user_id = :user" if user_id else ""
        query = text(
            f"SELECT {key}, model, sum(prompt_tokens), sum(completion_tokens), sum(calls) "
            f"FROM usage_days WHERE day >= :since{mine} GROUP BY {key}, model"
        )
        with eng.reading(self.engine) as session:
            rows = session.execute(query, {"since": since.isoformat(), "user": user_id})
            return [
                Used(str(k), str(model), int(p or 0), int(c or 0), int(n or 0))
                for k, model, p, c, n in rows
            ]


def fold(session: Session, keep: str, gone: str) -> None:
    """`gone`'s counts added to `keep`'s (a link: hermes/state/people.py), then dropped."""
    session.execute(_FOLD, {"keep": keep, "gone": gone})
    session.execute(text("DELETE FROM usage_days WHERE user_id = :gone"), {"gone": gone})
