"""The two stores of one person, laid out under `$HERMES_HOME/memories/<user_id>/`."""

from __future__ import annotations

from pathlib import Path

from hermes.config import MemoryConfig
from hermes.identity import ensure_private_dir, validate_user_id
from hermes.memory.render import render
from hermes.memory.store import MemoryStore, StoreError, Target


class StoreDisabledError(StoreError):
    pass


_SWITCH = {Target.MEMORY: "memory.memory_enabled", Target.USER: "memory.user_profile_enabled"}


class UserMemory:
    def __init__(self, home: Path, user_id: str, config: MemoryConfig) -> None:
        self.user_id = validate_user_id(user_id)
        self.config = config
        self.folder = home / "memories" / self.user_id
        self._stores = {
            Target.MEMORY: MemoryStore(
                self.folder / Target.MEMORY.filename, Target.MEMORY, config.memory_char_limit
            ),
            Target.USER: MemoryStore(
                self.folder / Target.USER.filename, Target.USER, config.user_char_limit
            ),
        }
        ensure_private_dir(home)
        ensure_private_dir(home / "memories")

    def enabled(self, target: Target) -> bool:
        if target is Target.MEMORY:
            return self.config.memory_enabled
        return self.config.user_profile_enabled

    def store(self, target: Target) -> MemoryStore:
        if not self.enabled(target):
            raise StoreDisabledError(
                f"The {target.noun.lower()} store is disabled ({_SWITCH[target]}: false)."
            )
        return self._stores[target]

    def file_store(self, target: Target) -> MemoryStore:
        """The store's file whether or not it is enabled (merges, admin status)."""
        return self._stores[target]

    def enabled_targets(self) -> list[Target]:
        return [target for target in Target if self.enabled(target)]

    def snapshot(self) -> str:
        """The frozen block for a session's system prompt: enabled, non-empty stores."""
        blocks = (render(t, self._stores[t].read()) for t in self.enabled_targets())
        return "\n\n".join(block for block in blocks if block)
