"""The consolidation check: every store over the threshold, of one user or of all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hermes.config import MemoryConfig
from hermes.identity import InvalidUserIdError, validate_user_id
from hermes.llm.types import ChatModel
from hermes.memory.consolidation import Outcome, consolidate, due, over_threshold
from hermes.memory.store import Target
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB


@dataclass(frozen=True, slots=True)
class StoreRun:
    user_id: str
    target: Target
    outcome: Outcome


def users_with_memory(home: Path, config: MemoryConfig, db: SessionDB) -> list[str]:
    """Users that have memory: a folder of stores, or rows with `memory.backend:
    database` (where the stores are is the source of truth)."""
    if config.backend == "database":
        return db.memory_stores.users()
    folder = home / "memories"
    ids = []
    for child in sorted(folder.iterdir()) if folder.is_dir() else []:
        try:
            ids.append(validate_user_id(child.name))
        except InvalidUserIdError:
            continue  # not ours: never touched
    return ids


async def check(
    home: Path,
    db: SessionDB,
    model: ChatModel | None,
    config: MemoryConfig,
    user_ids: list[str] | None = None,
    *,
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> list[StoreRun]:
    """Consolidate each store over the threshold (all stores with `force`); `progress`
    hears (users done, users in all)."""
    runs = []
    users = user_ids if user_ids is not None else await db.run(users_with_memory, home, config, db)
    for done, user_id in enumerate(users, 1):
        if progress:
            progress(done - 1, len(users))
        memory = UserMemory(home, user_id, config, db)
        for target in await db.run(_to_consolidate, memory, db, config, force):
            outcome = await consolidate(
                memory, target, db, model, config.consolidation, force=force
            )
            runs.append(StoreRun(user_id, target, outcome))
    if progress:
        progress(len(users), len(users))
    return runs


def _to_consolidate(
    memory: UserMemory, db: SessionDB, config: MemoryConfig, force: bool
) -> list[Target]:
    """The person's stores to consolidate now: over the threshold and not waiting out a
    backoff (with `force`, every store of two entries or more)."""
    chosen = []
    for target in memory.enabled_targets():
        state = memory.store(target).read().with_pending()
        if force:
            if len(state.entries) >= 2:
                chosen.append(target)
        elif over_threshold(state, config.consolidation) and due(db, memory.user_id, target):
            chosen.append(target)
    return chosen


def crosses_threshold(used_before: int, used_after: int, limit: int, threshold: float) -> bool:
    """True when a write takes a store past the threshold (not when it stays above)."""
    line = threshold * limit
    return used_before <= line < used_after
