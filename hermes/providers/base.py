"""The memory-provider seam: what an external memory layer is told, and when.

The built-in MEMORY.md/USER.md stay the always-present, curated memory; a provider
adds deeper recall beside them, never instead of them. The agent calls the provider
at five points, always through `ProviderHost` (hermes/providers/host.py), which bounds
every call in time and keeps a provider's failure from ever failing a turn:

- session start: `system_prompt_block` (static text, frozen into the session's prompt);
- before the model is called for a turn: `prefetch` (recalled text, fenced onto the
  user message, never into the frozen prompt);
- after the reply is delivered: `sync_turn` (off the reply path);
- on every change of the built-in stores, whoever made it (the memory tool, chat and
  CLI commands, merges, undo, consolidation): `on_memory_write`;
- at a real end of a session (/new, idle): `on_session_end`.

Every call names the person (`user_id`, ours, whatever platform): one provider serves
everyone in a multi-user gateway and must keep them apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol


class AgentContext(StrEnum):
    """Which part of the agent is calling: providers write only from `primary`."""

    PRIMARY = "primary"
    REVIEW = "review"
    COMPRESSION = "compression"
    SCHEDULER = "scheduler"


@dataclass(frozen=True, slots=True)
class ProviderSession:
    session_id: str
    user_id: str
    platform: str
    agent_context: AgentContext = AgentContext.PRIMARY


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """One applied change to a built-in store."""

    action: str  # add | replace | remove | undo | merge | consolidate
    target: str  # memory | user
    content: str  # the entry (or store text) after the change; '' when removed
    before: str | None
    user_id: str
    actor: str
    session_id: str | None = None


class MemoryProvider(Protocol):
    name: str

    def system_prompt_block(self, session: ProviderSession) -> str:
        """Static text for the session's frozen prompt ('' for none)."""

    async def prefetch(self, query: str, session: ProviderSession) -> str:
        """Recalled context for this turn ('' for none)."""

    async def sync_turn(
        self,
        user_text: str,
        assistant_text: str,
        session: ProviderSession,
        messages: list[dict[str, Any]],
    ) -> None:
        """A completed turn, after its reply."""

    def on_memory_write(self, write: MemoryWrite) -> None:
        """A built-in store changed."""

    async def on_session_end(
        self, session: ProviderSession, messages: list[dict[str, Any]]
    ) -> None:
        """The session ended for real (not a compression)."""


class NoProvider:
    """The default: the built-in stores only."""

    name = "builtin"

    def system_prompt_block(self, session: ProviderSession) -> str:
        return ""

    async def prefetch(self, query: str, session: ProviderSession) -> str:
        return ""

    async def sync_turn(
        self,
        user_text: str,
        assistant_text: str,
        session: ProviderSession,
        messages: list[dict[str, Any]],
    ) -> None:
        return None

    def on_memory_write(self, write: MemoryWrite) -> None:
        return None

    async def on_session_end(
        self, session: ProviderSession, messages: list[dict[str, Any]]
    ) -> None:
        return None


__all__ = ["AgentContext", "MemoryProvider", "MemoryWrite", "NoProvider", "ProviderSession"]
