"""Undo the last change to a person's memory, consolidations included, byte for byte."""

from __future__ import annotations

from hermes.memory.journal import swap_recorded
from hermes.memory.store import Target
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from hermes.state.memory_log import MemoryEventRecord, VersionRecord


def undo_last(memory: UserMemory, db: SessionDB, actor: str = "user") -> tuple[bool, str]:
    """(done, message). Refuses when the store changed since the recorded change."""
    version = db.memory_log.last_version(memory.user_id)
    if version is None or version.id is None:
        return False, "Nothing to undo."
    target = Target(version.target)
    store = memory.store(target)
    event = MemoryEventRecord(
        memory.user_id, target.value, "undo", version.text_after, version.text_before, actor
    )
    swap = VersionRecord(  # what the files go from and to: the version, backwards
        memory.user_id,
        target.value,
        version.text_after,
        version.text_before,
        actor,
        reason="undo",
        pending_before=version.pending_after,
        pending_after=version.pending_before,
    )
    if not swap_recorded(store, db, [event], swap, undoes=version.id):
        return False, (
            f"The {target.noun.lower()} changed after the last recorded change "
            "(edited by hand?); nothing was undone."
        )
    what = "consolidation" if version.actor == "consolidator" else version.reason or "change"
    when = f"{version.created_at:%Y-%m-%d %H:%M} UTC"
    return True, f"Undid the last {what} of the {target.noun.lower()} ({when})."
