"""What the agent needs from a model, independent of the SDK."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it (may be malformed)

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class ModelReply:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    model: str = ""  # the model asked (the configured name: what its price is set by)


class ChatModel(Protocol):
    """One chat-completion call; LLMClient implements it over HTTP (streamed or not)."""

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        """`on_text` (when given) gets the reply's text so far as it is written; a model
        that cannot stream may ignore it."""
        ...
