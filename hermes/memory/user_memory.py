"""The two stores of one person: files under `$HERMES_HOME/memories/<user_id>/`, or,
with `memory.backend: database` (implied by a PostgreSQL database.url), rows of the
database holding the same text."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from hermes.config import MemoryConfig
from hermes.identity import ensure_private_dir, validate_user_id
from hermes.memory.db_store import DatabaseStore
from hermes.memory.render import render
from hermes.memory.store import MemoryStore, Store, StoreError, Target
from hermes.state.db import SessionDB

T = TypeVar("T")
ARCHIVE = ".merged"  # memories/.merged/: the folders of people merged away by a link


class StoreDisabledError(StoreError):
    pass


_SWITCH = {Target.MEMORY: "memory.memory_enabled", Target.USER: "memory.user_profile_enabled"}


class UserMemory:
    def __init__(
        self, home: Path, user_id: str, config: MemoryConfig, db: SessionDB | None = None
    ) -> None:
        self.user_id = validate_user_id(user_id)
        self.config = config
        self.home = home
        self.folder = home / "memories" / self.user_id
        limits = {Target.MEMORY: config.memory_char_limit, Target.USER: config.user_char_limit}
        self.db = db if config.backend == "database" else None
        if config.backend == "database":
            if db is None:
                raise ValueError("memory.backend: database needs the database (pass db)")
            self._stores: dict[Target, Store] = {
                t: DatabaseStore(db, self.user_id, t, limits[t]) for t in Target
            }
        else:
            self._stores = {t: MemoryStore(self.folder / t.filename, t, limits[t]) for t in Target}
        ensure_private_dir(home)
        ensure_private_dir(home / "memories")

    def enabled(self, target: Target) -> bool:
        if target is Target.MEMORY:
            return self.config.memory_enabled
        return self.config.user_profile_enabled

    def store(self, target: Target) -> Store:
        if not self.enabled(target):
            raise StoreDisabledError(
                f"The {target.noun.lower()} store is disabled ({_SWITCH[target]}: false)."
            )
        return self._stores[target]

    def file_store(self, target: Target) -> Store:
        """The store whether or not it is enabled (merges, admin status)."""
        return self._stores[target]

    def enabled_targets(self) -> list[Target]:
        return [target for target in Target if self.enabled(target)]

    def snapshot(self) -> str:
        """The frozen block for a session's system prompt: enabled, non-empty stores."""
        blocks = (render(t, self._stores[t].read()) for t in self.enabled_targets())
        return "\n\n".join(block for block in blocks if block)

    def holding(self, work: Callable[[], T]) -> T:
        """Run `work` with both stores held against every other writer (a merge reads
        them and moves them away): their files' locks, or one database transaction
        that every change inside joins (then `work` may run again after a rollback)."""
        if self.db is not None:
            return self.db.memory_stores.change([self.user_id], work)
        with ExitStack() as held:
            if self.folder.exists():
                for target in Target:  # a fixed order: memory, then user
                    store = self._stores[target]
                    assert isinstance(store, MemoryStore)
                    held.enter_context(store.held())
            return work()

    def archive(self, merged_into: str) -> str | None:
        """Keep these stores, untouched, out of use (their person was merged into
        `merged_into`); where they went, or None when there was nothing to keep."""
        if self.db is not None:
            kept = self.db.memory_stores.archive(self.user_id, merged_into)
            return "the database's memory archive" if kept else None
        if not self.folder.exists():
            return None
        archive = self.home / "memories" / ARCHIVE
        archive.mkdir(mode=0o700, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        moved = archive / f"{self.user_id}-{stamp}"
        shutil.move(self.folder, moved)
        return str(moved)
