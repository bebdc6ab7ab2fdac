"""Merging the stores of two users when their identities are linked.

Per store: the kept user's entries, then the other's entries it does not already have,
in their order, as many as fit under the limit. Entries that do not fit wait in the
store's `.pending` file and the store is flagged for consolidation, which folds them in
(see consolidation.py): nothing is dropped. Each merged entry is a memory_event (action
`merge`, or `merge_pending` while it waits) and the whole change one undoable version.
The other user's stores are then kept, untouched, under `memories/.merged/` (in the
database: its memory archive). They stay held from the first read to the move, so
nothing written to them is left behind; callers hold the memory gate exclusively
around the merge and the user merge in state.db (see gate.py and
gateway/admission/people.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hermes.config import MemoryConfig
from hermes.memory import entries as fmt
from hermes.memory.journal import swap_recorded
from hermes.memory.store import Store, Target
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from hermes.state.memory_log import MemoryEventRecord, VersionRecord

MAX_RACE_RETRIES = 5


@dataclass
class MergeReport:
    added: dict[Target, int] = field(default_factory=dict)
    waiting: dict[Target, int] = field(default_factory=dict)
    archived: str | None = None  # where the other person's stores are kept

    def describe(self) -> str:
        parts = []
        for target in Target:
            added, waiting = self.added.get(target, 0), self.waiting.get(target, 0)
            if added or waiting:
                text = f"{target.noun.lower()}: {added} entries merged"
                if waiting:
                    text += f", {waiting} waiting for consolidation (over the limit)"
                parts.append(text)
        return "; ".join(parts) or "no memory entries to merge"


class MergeError(Exception):
    pass


def merge_memory(
    home: Path, config: MemoryConfig, db: SessionDB, keep: str, gone: str
) -> MergeReport:
    """Fold `gone`'s stores into `keep`'s; then archive `gone`'s folder."""
    kept, old = UserMemory(home, keep, config, db), UserMemory(home, gone, config, db)
    return old.holding(lambda: _merge_held(db, kept, old))


def _merge_held(db: SessionDB, kept: UserMemory, old: UserMemory) -> MergeReport:
    keep = kept.user_id
    report = MergeReport()
    _refuse_damaged(old, kept)  # before writing anything: a merge is all or nothing
    for target in Target:
        source = old.file_store(target).read()
        incoming = [*source.entries, *source.pending]
        if incoming:
            added, waiting = _merge_store(kept.file_store(target), incoming, db, keep)
            report.added[target], report.waiting[target] = added, waiting
            if waiting:
                db.memory_log.update_consolidation_state(
                    keep,
                    target.value,
                    needs_consolidation=True,
                    next_attempt_at=None,
                    last_error=f"{waiting} entries from a linked account wait to be merged",
                )
    report.archived = old.archive(keep)
    return report


def _refuse_damaged(old: UserMemory, kept: UserMemory) -> None:
    """A source that cannot be read, or a destination that must not be rewritten, stops
    the merge. (A source over its limit is fine: its entries are all still there.)"""
    for target in Target:
        source, destination = old.file_store(target), kept.file_store(target)
        read = source.read()
        if read.damage and not read.entries:
            raise MergeError(f"{source.where} cannot be read ({read.damage}); fix it first")
        damage = destination.read().damage
        if damage:
            raise MergeError(f"{destination.where} needs fixing by hand first: {damage}")


def _merge_store(store: Store, incoming: list[str], db: SessionDB, user_id: str) -> tuple[int, int]:
    for _ in range(MAX_RACE_RETRIES):
        state = store.read()
        if state.damage:
            raise MergeError(f"{store.where} needs fixing by hand first: {state.damage}")
        have = set(state.entries) | set(state.pending)
        entries, waiting = list(state.entries), list(state.pending)
        added: list[str] = []
        for entry in dict.fromkeys(incoming):  # in order, each once
            if entry in have:
                continue
            if not waiting and fmt.usage([*entries, entry]) <= store.limit:
                entries.append(entry)
                added.append(entry)
            else:
                waiting.append(entry)
        new_text = fmt.serialize(entries)
        new_pending = fmt.serialize(waiting) if waiting else ""
        parked = waiting[len(state.pending) :]
        if not added and not parked:
            return 0, 0  # everything incoming is there already: nothing to write
        events = [
            MemoryEventRecord(user_id, store.target.value, "merge", None, e, "user") for e in added
        ] + [
            MemoryEventRecord(user_id, store.target.value, "merge_pending", None, e, "user")
            for e in parked
        ]
        version = VersionRecord(
            user_id,
            store.target.value,
            state.raw,
            new_text,
            "user",
            reason="merge of a linked account",
            pending_before=state.pending_raw,
            pending_after=new_pending,
        )
        if swap_recorded(store, db, events, version):
            return len(added), len(parked)
    raise MergeError(f"{store.where} kept changing during the merge; try again")
