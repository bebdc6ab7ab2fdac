"""Memory changes with provenance that survives a crash: one protocol for all of them.

Every change of a store, whoever makes it (the tool, `forget`, consolidation, a merge
of linked accounts, undo), is recorded in state.db (the events with their cause, the
store's whole text before and after), so `memory why` can say where an entry came from
and `memory undo` can restore exact bytes. The files and their record are kept whole
across a crash, in this order:

1. under the store's lock, once the change is decided (the tool decides there; the
   others decided earlier and check that the store still holds what they read) and
   before the files are replaced, an *intent* is recorded: the text the file (and the
   waiting-entries file) will hold and the events and version to log, or the version
   an undo marks undone (one transaction);
2. the files are replaced (temp file, fsync, rename);
3. the intent is completed into its events and version (one transaction).

With `memory.backend: database` the store's new text and its record commit in one
transaction (db_store.py): the events and version are recorded directly, without an
intent, and a crash leaves either both or neither.

A process killed between 1 and 3 leaves an intent. `reconcile`, run under the same
lock before the store is next used (every change runs it first), settles it: the files
hold the intent's text -> completed; they do not -> dropped (the change never
happened). Then, if the file differs from what its last recorded version says it
should hold (a hand edit: no path of Hermes writes unrecorded), the difference is
recorded as a change made outside Hermes, entry by entry, with a version, so `why`
explains every entry and `undo` can go back past it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from hermes.memory import entries as fmt
from hermes.memory.store import Store, StoreError, StoreState, Target
from hermes.memory.tool import MemoryTool, ToolOutcome
from hermes.state.db import SessionDB
from hermes.state.memory_log import MemoryEventRecord, VersionRecord

Actor = Literal["agent", "user", "admin", "consolidator"]
OUTSIDE = "outside"  # the action of a change found on disk, made outside Hermes


def run_recorded(
    tool: MemoryTool,
    db: SessionDB,
    args: Mapping[str, Any],
    *,
    actor: Actor,
    session_id: str | None = None,
    message_id: int | None = None,
) -> ToolOutcome:
    user_id = tool.memory.user_id
    intents: list[int] = []

    def settle(target: Target, state: StoreState) -> None:  # the same lock, the same read
        _settle(state, target, db, user_id)

    def record_intent(outcome: ToolOutcome) -> None:
        change = outcome.change
        if change is None:
            return
        event = MemoryEventRecord(
            user_id=user_id,
            target=change.target.value,
            action=change.action,
            entry_before=change.before,
            entry_after=change.after,
            actor=actor,
            session_id=session_id,
            message_id=message_id,
        )
        version = VersionRecord(
            user_id,
            change.target.value,
            change.file_before,
            change.file_after,
            actor,
            reason=change.action,
        )
        if tool.memory.file_store(change.target).atomic:  # commits with its record
            db.memory_log.log_change([event], version)
            return
        intents.append(db.memory_log.begin_change([event], version))

    outcome = tool.run(
        args, before_write=record_intent, before_decide=settle, after_write=complete(db, intents)
    )
    return outcome


def swap_recorded(
    store: Store,
    db: SessionDB,
    events: Sequence[MemoryEventRecord],
    version: VersionRecord,
    *,
    undoes: int | None = None,
    versions: list[int] | None = None,
) -> bool:
    """A change decided away from the lock (consolidation, a merge, undo), made through
    the same journal as the tool's. `version` says it: the store goes from its
    text_before to its text_after (and the waiting-entries file from pending_before to
    pending_after, when either is set), written only if the store still holds
    text_before; the intent is recorded before the files are replaced and completed
    after, so a crash in between is settled as this change, never as one made outside
    Hermes. `version` is logged, or with `undoes` that version is marked undone. False:
    the store changed meanwhile, nothing was written or recorded. (A write that fails
    leaves its intent to the next settle, which drops it: the files do not hold it.) The
    id of the version logged is added to `versions`."""
    pending = None
    if version.pending_before is not None or version.pending_after is not None:
        pending = (version.pending_before or "", version.pending_after or "")
    intents: list[int] = []

    def settle(state: StoreState) -> None:
        _settle(state, store.target, db, version.user_id)

    def record_intent() -> None:
        if store.atomic:  # the store commits with its record: no intent
            db.memory_log.log_change(events, version, undoes=undoes, versions=versions)
            return
        intents.append(db.memory_log.begin_change(events, version, undoes=undoes))

    return store.compare_and_swap(
        version.text_before,
        version.text_after,
        pending,
        before_check=settle,
        before_write=record_intent,
        after_write=complete(db, intents, versions),
    )


def complete(
    db: SessionDB, intents: list[int], versions: list[int] | None = None
) -> Callable[[], None]:
    """Complete the intents recorded so far, still under the store's lock (in the
    database, inside the change's own transaction: the pair commits as one)."""

    def run() -> None:
        while intents:
            db.memory_log.complete_change(intents.pop(), versions)

    return run


def reconcile(store: Store, db: SessionDB, user_id: str) -> None:
    """Settle what a crash left between a store and its record (see the module doc)."""

    def settle(state: StoreState) -> tuple[None, None]:
        _settle(state, store.target, db, user_id)
        return None, None

    try:
        store.mutate(settle)  # only for its lock: settle never writes the file
    except StoreError:
        return  # a damaged or busy store is reported by the operation that needs it


def _settle(state: StoreState, store_target: Target, db: SessionDB, user_id: str) -> None:
    log, target = db.memory_log, store_target.value
    intents, expected = log.unsettled(user_id, target)  # one read, nothing to do mostly
    for intent in intents:
        if intent.made(state.raw, state.pending_raw):
            log.complete_change(intent.id)
        else:
            log.drop_change(intent.id)
    if intents:
        expected = log.expected_text(user_id, target)
    if expected is None or expected == state.raw:
        return
    before, after = fmt.parse(expected), list(state.entries)
    events = [
        MemoryEventRecord(user_id, target, OUTSIDE, entry, None, "user")
        for entry in before
        if entry not in after
    ]
    events += [
        MemoryEventRecord(user_id, target, OUTSIDE, None, entry, "user")
        for entry in after
        if entry not in before
    ]
    version = VersionRecord(user_id, target, expected, state.raw, "user", reason=OUTSIDE)
    db.memory_log.record_memory_change(events, version)
