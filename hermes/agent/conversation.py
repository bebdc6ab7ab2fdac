"""A live conversation: one session row, its frozen system prompt and its history."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hermes.agent.tokens import estimate_messages
from hermes.places import Surface
from hermes.state.conversations import NewMessage
from hermes.state.models import ChatSession, Message


@dataclass
class Conversation:
    session: ChatSession
    system_prompt: str
    history: list[dict[str, Any]] = field(default_factory=list)  # OpenAI chat shape
    last_prompt_tokens: int | None = None  # as reported by the endpoint for the last call
    unsent: list[dict[str, Any]] = field(default_factory=list)  # added since that call
    pointer: str = ""  # one line about the previous session, for the first turn only

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def user_id(self) -> str:
        return self.session.user_id

    @property
    def shared(self) -> bool:
        """A group chat's one conversation: it belongs to the chat, not to a person."""
        return self.session.shared

    @property
    def home_surface(self) -> Surface:
        s = self.session
        return Surface.recorded(s.platform, s.chat_type, s.chat_id, s.thread_id)

    def projected_tokens(self, extra: list[dict[str, Any]]) -> int:
        """Prompt size of the next call: reported usage plus an estimate of what's new."""
        system = [{"role": "system", "content": self.system_prompt}]
        if self.last_prompt_tokens is None:
            return estimate_messages([*system, *self.history, *extra])
        return self.last_prompt_tokens + estimate_messages([*self.unsent, *extra])

    def append(self, messages: list[dict[str, Any]]) -> None:
        self.history.extend(messages)
        self.unsent.extend(messages)

    def mark_sent(self, prompt_tokens: int | None) -> None:
        if prompt_tokens is not None:
            self.last_prompt_tokens = prompt_tokens
            self.unsent = []


def to_openai(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = json.loads(message.tool_calls)
        out["content"] = message.content or None
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id or ""
    return out


def to_new_message(message: dict[str, Any], platform_message_id: str | None = None) -> NewMessage:
    return NewMessage(
        role=message["role"],
        content=message.get("content") or "",
        tool_calls=message.get("tool_calls"),
        tool_call_id=message.get("tool_call_id"),
        tool_name=message.get("name"),
        platform_message_id=platform_message_id,
    )


def transcript(messages: list[dict[str, Any]], limit: int) -> str:
    """User and assistant text as `role: content` lines, keeping the newest `limit` chars."""
    lines = [
        f"{m['role']}: {m['content']}"
        for m in messages
        if m["role"] in ("user", "assistant") and m.get("content")
    ]
    text = "\n".join(lines)
    return text if len(text) <= limit else "…" + text[-limit:]
