"""The memory-provider interface: what an external memory layer is told, and when.

The built-in MEMORY.md/USER.md stay the always-present, curated memory; at most one
provider adds deeper recall beside them, never instead of them. Providers are called
only through `ProviderHost` (hermes/providers/host.py), which bounds every call in time,
enforces the recall mode, keeps a provider's failure from ever failing a turn, and
gives each person their own provider instance (one identity per person on the provider
side, namespaced by our user id, whatever platform they write from).

A provider written for the peer's interface ports by renaming at most: the same members
with the same arguments. `BaseProvider` gives every member a harmless default, so a
provider implements only what it does.

When the host calls what (each person's instance):
- `initialize` at each session start or resume, then `system_prompt_block` (static
  text frozen into that session's prompt);
- `prefetch` before the model is called for a turn (within `memory.prefetch_timeout_ms`,
  or skipped), `queue_prefetch` after the turn to warm the next;
- `sync_turn` after the reply, off the reply path, in order per person;
- `on_memory_write` on every add, replace and remove of the built-in stores, and on
  undo, merges and consolidations, as the changes they are;
- `on_session_switch` on a new, resumed or compressed session; `on_session_end` at a
  real end (/new, idle); `on_pre_compress` before a compression summary is written;
- `get_tool_schemas` / `handle_tool_call` for the provider's own tools (recall modes
  `tools` and `hybrid` only; a name that shadows a core tool is refused);
- `shutdown` at process stop; `backup_paths` for `hermes backup`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


class AgentContext(StrEnum):
    """Which part of the agent is calling: providers write only from `primary`."""

    PRIMARY = "primary"
    REVIEW = "review"
    COMPRESSION = "compression"
    SCHEDULER = "scheduler"


class RecallMode(StrEnum):
    CONTEXT = "context"  # prefetch results injected; no provider tools
    TOOLS = "tools"  # provider tools offered; nothing injected
    HYBRID = "hybrid"  # both


@dataclass(frozen=True, slots=True)
class ConfigField:
    """One setting a provider needs (`hermes memory setup` walks them)."""

    key: str
    description: str
    secret: bool = False  # referenced by env var name in config, never written there
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    env_var: str | None = None
    kind: str = ""  # "url", "number", "name": checked offline by `problem`

    def problem(self, value: object) -> str:
        """Why `value` cannot be this setting ('' when it can, or when it is empty)."""
        text = str(value).strip() if value is not None else ""
        if not text:
            return ""
        if self.choices and text not in self.choices:
            return f"{self.key} must be one of {', '.join(self.choices)}"
        if self.kind == "url":
            parts = urlsplit(text)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                return f"{self.key} must be an http:// or https:// URL with a host, not {text!r}"
        elif self.kind == "number":
            try:
                number = float(text)
            except ValueError:
                number = -1.0
            if not number > 0:
                return f"{self.key} must be a positive number, not {text!r}"
        elif self.kind == "name" and not _NAME.fullmatch(text):
            return f"{self.key} may hold letters, digits and _ . : - only (1-64), not {text!r}"
        return ""


@dataclass(frozen=True, slots=True)
class ProviderSession:
    """The host's description of a session (providers get its parts as arguments)."""

    session_id: str
    user_id: str
    platform: str
    agent_context: AgentContext = AgentContext.PRIMARY


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """One applied change to a built-in store (what the memory service reports)."""

    action: str  # add | replace | remove | undo | merge | consolidate
    target: str  # memory | user
    content: str  # the entry (or store text) after the change; '' when removed
    before: str | None
    user_id: str
    actor: str
    session_id: str | None = None


class MemoryProvider(Protocol):
    name: str

    def is_available(self) -> bool:
        """Config and installed dependencies only; never the network."""

    def unavailable_reason(self) -> str:
        """What is missing when `is_available()` is False."""

    def initialize(
        self,
        session_id: str,
        *,
        hermes_home: Path,
        platform: str,
        user_id: str,
        agent_context: str,
    ) -> None:
        """A session of this instance's person starts or resumes."""

    def system_prompt_block(self) -> str:
        """Static text for the session's frozen prompt ('' for none)."""

    async def prefetch(self, query: str, *, session_id: str) -> str:
        """Recalled context for this turn ('' for none)."""

    async def queue_prefetch(self, query: str, *, session_id: str) -> None:
        """After a turn: warm what the next turn's prefetch will need."""

    async def sync_turn(
        self,
        user_text: str,
        assistant_text: str,
        *,
        session_id: str,
        messages: list[dict[str, Any]],
    ) -> None:
        """A completed turn, after its reply."""

    def on_memory_write(
        self, action: str, target: str, content: str, *, metadata: dict[str, Any]
    ) -> None:
        """A built-in store changed."""

    async def on_session_switch(
        self, new_session_id: str, *, parent_session_id: str | None, reason: str
    ) -> None:
        """reason: new | resume | compression."""

    async def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        """The current session ended for real (not a compression)."""

    async def on_pre_compress(self, messages: list[dict[str, Any]]) -> str:
        """Text added to the compression summary prompt ('' for none)."""

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-tool schemas of the provider's own tools."""

    async def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        """One call of one of those tools; the result as JSON text."""

    def get_config_schema(self) -> list[ConfigField]:
        """The settings `hermes memory setup` asks for."""

    def save_config(self, values: dict[str, Any], hermes_home: Path) -> None:
        """Store provider-specific files under `hermes_home` (config.yaml is ours)."""

    async def shutdown(self) -> None:
        """The process stops: flush and close."""

    def backup_paths(self) -> list[Path]:
        """Files outside HERMES_HOME that `hermes backup` must include."""

    def merge_people(self, keep: str, gone: str, hermes_home: Path) -> None:
        """Two people were linked: from now on `gone` is `keep`. Whatever the provider
        keeps for `gone` (rows, a namespace, a peer) becomes `keep`'s, before this
        returns (it runs inside the link's lock; an error fails the link, reported).
        Called on an instance that was never initialized."""


ProviderFactory = Callable[[], MemoryProvider]  # a new, unconfigured instance


MIN_SECRET = 6  # a shorter "secret" would blot out ordinary words of a message


def scrub(text: str, secrets: list[str]) -> str:
    """`text` with every secret in it replaced (a service that echoes the key it was
    given in its error, which would be stored in the outbox and shown by doctor)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def secret_values(provider: Any) -> list[str]:
    """The values of a provider's secret settings (its API key), any provider with
    `settings` and a config schema: never in a stored or shown error (`scrub`)."""
    settings = getattr(provider, "settings", None)
    if not isinstance(settings, dict):
        return []
    try:
        fields = list(provider.get_config_schema())
    except Exception:  # a provider whose schema needs what it lacks
        return []
    found = (str(settings.get(f.key) or "") for f in fields if getattr(f, "secret", False))
    return [value for value in found if len(value) >= MIN_SECRET]


class BaseProvider:
    """Defaults for every member: a provider overrides what it does."""

    name = "base"
    # what it needs to run, for `hermes memory providers`: "LLM", "embeddings",
    # "a server", "a cloud key"; nothing = local, no network
    needs: tuple[str, ...] = ()

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        self.settings = dict(settings or {})
        self.user_id = ""
        self.session_id = ""
        self.hermes_home: Path | None = None

    def is_available(self) -> bool:
        return True

    def unavailable_reason(self) -> str:
        return ""

    def initialize(
        self,
        session_id: str,
        *,
        hermes_home: Path,
        platform: str,
        user_id: str,
        agent_context: str,
    ) -> None:
        self.session_id, self.user_id, self.hermes_home = session_id, user_id, hermes_home

    def system_prompt_block(self) -> str:
        return ""

    async def prefetch(self, query: str, *, session_id: str) -> str:
        return ""

    async def queue_prefetch(self, query: str, *, session_id: str) -> None:
        return None

    async def sync_turn(
        self,
        user_text: str,
        assistant_text: str,
        *,
        session_id: str,
        messages: list[dict[str, Any]],
    ) -> None:
        return None

    def on_memory_write(
        self, action: str, target: str, content: str, *, metadata: dict[str, Any]
    ) -> None:
        return None

    async def on_session_switch(
        self, new_session_id: str, *, parent_session_id: str | None, reason: str
    ) -> None:
        self.session_id = new_session_id

    async def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        return None

    async def on_pre_compress(self, messages: list[dict[str, Any]]) -> str:
        return ""

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return []

    async def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        return '{"success": false, "error": "this provider has no tools"}'

    def get_config_schema(self) -> list[ConfigField]:
        return []

    def save_config(self, values: dict[str, Any], hermes_home: Path) -> None:
        return None

    async def shutdown(self) -> None:
        return None

    def backup_paths(self) -> list[Path]:
        return []

    def merge_people(self, keep: str, gone: str, hermes_home: Path) -> None:
        return None  # nothing kept per person

    def warm(self) -> None:
        """Make now what the first call would make (a library imported, a client built
        and connected), so a person's first turn does not wait for it. Optional (the host
        calls it when a provider has it), blocking: called off the event loop, at start."""
        return None


class NoProvider(BaseProvider):
    """The default: the built-in stores only."""

    name = "builtin"


__all__ = [
    "AgentContext",
    "BaseProvider",
    "ConfigField",
    "MemoryProvider",
    "MemoryWrite",
    "NoProvider",
    "ProviderSession",
    "RecallMode",
]
