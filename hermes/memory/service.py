"""The memory service: the one path by which a person's memory changes.

The memory tool (the agent), `/memory forget|undo|consolidate`, `hermes memory
add|replace|remove|undo|consolidate`, linking merges and the scheduler's consolidation
check all call it, so every change gets the same treatment, in this order:

1. the tool's semantics and the security scan, decided under the store's lock on the
   fresh file (hermes/memory/tool.py), off the event loop;
   An auxiliary model, when configured for it, first judges an entry that passes the
   patterns but speaks to the assistant (scan_judge.py);
2. provenance: the event and the store's before/after version in state.db, for
   `/memory why` and exact undo (journal.py);
3. the provider mirror: the external provider, if any, hears of the change;
4. the threshold check: a write that takes a store past the consolidation threshold
   starts a consolidation check in the background (drained before a CLI exits).

It is also the one place that computes memory status, for the chat and the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from hermes import metrics
from hermes.config import MemoryConfig
from hermes.identity import validate_user_id
from hermes.llm.metering import charged_to
from hermes.llm.types import ChatModel
from hermes.memory import entries as fmt
from hermes.memory import sweep
from hermes.memory.consolidation import over_threshold
from hermes.memory.gate import database_gate, memory_gate
from hermes.memory.journal import Actor, reconcile, run_recorded, swap_recorded
from hermes.memory.merge import MergeError, MergeReport, merge_memory
from hermes.memory.provenance import Change, explain
from hermes.memory.render import display_entry
from hermes.memory.scan_judge import Judge, Verdict
from hermes.memory.scanner import scan
from hermes.memory.store import StoreBusyError, StoreError, StoreIOError, Target
from hermes.memory.tool import MemoryTool, ToolOutcome
from hermes.memory.undo import undo_last
from hermes.memory.user_memory import UserMemory
from hermes.providers.base import MemoryWrite
from hermes.providers.host import ProviderHost, ProviderMergeError
from hermes.state.db import SessionDB
from hermes.state.memory_log import Held, MemoryEventRecord, VersionRecord
from hermes.state.models import MemoryPending, MemoryVersion

logger = logging.getLogger(__name__)
GATE_HOPS = 8  # a write follows at most this many merges made while it waited
# writes held for the safety check's model, per person: past this, a write is refused
# with a word to the model (one person left 1,200 while the model was down, and its
# return was 1,202 model calls in 30 s)
MAX_HELD = 20
SETTLE_AT_ONCE = 50  # held writes judged again per pass (the rest at the next one)


@dataclass(slots=True)
class PendingReport:
    """What judging the held writes again did."""

    written: int = 0
    refused: int = 0
    failed: int = 0  # allowed, but the write itself failed (its entry is gone, say)
    waiting: int = 0  # the model still could not answer

    def describe(self) -> str:
        return (
            f"{self.written} written, {self.refused} refused, {self.failed} failed, "
            f"{self.waiting} still waiting"
        )


def _full(verdict: Verdict) -> str:
    why = (verdict.unavailable or "").rstrip(". ")
    return (
        f"Not written: the safety check is unavailable ({why}) and {MAX_HELD} writes of "
        "this person already wait for it, which is as many as are kept. Nothing more is "
        "held until they are judged: do not ask again now; save only what matters most "
        "later, when the check answers."
    )


def _held(verdict: Verdict) -> str:
    why = (verdict.unavailable or "").rstrip(". ")
    return (
        f"Held for a safety check ({why}): nothing is in memory yet, and the entry is "
        "saved as soon as the check passes, with no need to ask again. It is pending."
    )


@dataclass(frozen=True, slots=True)
class StoreStatus:
    """One store's state, as every status display shows it."""

    target: Target
    enabled: bool
    used: int = 0
    limit: int = 0
    percent: int = 0
    entries: int = 0
    waiting: int = 0  # entries of a merged account waiting for consolidation
    last_consolidated_at: datetime | None = None
    last_summary: str = ""
    damage: str | None = None  # why the file must be fixed by hand
    needs_consolidation: bool = False  # over the threshold (waiting entries counted)
    last_error: str | None = None  # of the last consolidation attempt
    threshold: int = 0  # percent: memory.consolidation.threshold (status() sets it)

    def remark(self) -> str:
        """What needs doing, in the words every status display uses ('' when nothing)."""
        if self.damage:
            return f"needs fixing by hand: {self.damage}"
        if not self.needs_consolidation:
            return ""
        why = self.last_error or (
            f"{self.waiting} merged entries waiting"
            if self.waiting
            else f"over the {self.threshold}% threshold"
        )
        return f"needs consolidation ({why})"


class MemoryService:
    def __init__(
        self,
        home: Path,
        config: MemoryConfig,
        db: SessionDB,
        *,
        model: ChatModel | None = None,  # for consolidation (the auxiliary model)
        providers: ProviderHost | None = None,
        auto_consolidate: bool = True,
        judge: Judge | None = None,  # the scan's second stage, if a model is set for it
    ) -> None:
        self.home, self.config, self.db, self.model = home, config, db, model
        self.judge = judge
        self.providers = providers or ProviderHost()
        self.auto_consolidate = auto_consolidate
        self._checks: dict[str, asyncio.Task[Any]] = {}
        self._settling: asyncio.Task[PendingReport] | None = None

    def of(self, user_id: str) -> UserMemory:
        return self._memory_of(user_id)

    def gate(
        self, user_ids: Sequence[str], *, exclusive: bool = False
    ) -> contextlib.AbstractContextManager[None]:
        """These people's gates between memory writes and merges (hermes/memory/gate.py):
        in the database when the stores are there on PostgreSQL, else lock files."""
        if self.config.backend == "database" and self.db.backend == "postgresql":
            return database_gate(self.db.memory_stores, user_ids, exclusive=exclusive)
        return memory_gate(self.home, user_ids, exclusive=exclusive)

    @contextlib.contextmanager
    def gated(self, user_id: str) -> Iterator[str]:
        """Pass the gate of the person `user_id` is now (shared): one merged away while
        this waited is followed to whom they became, whose gate is passed instead;
        yields that id."""
        for _ in range(GATE_HOPS):
            with self.gate([user_id]):
                current = self.db.people.current_id(user_id)
                if current == user_id:
                    yield user_id
                    return
            user_id = current
        raise StoreBusyError("memory is busy with merges of linked accounts; try again")

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one service per process; paths only
    def _memory_of(self, user_id: str) -> UserMemory:
        return UserMemory(self.home, user_id, self.config, self.db)

    # -- changes ---------------------------------------------------------------------------

    async def apply(
        self,
        user_id: str,
        args: Mapping[str, Any],
        *,
        actor: Actor,
        session_id: str | None = None,
        message_id: int | None = None,
        context: str = "",
    ) -> ToolOutcome:
        """A memory-tool operation (add / replace / remove) for `user_id`; `context`
        goes to the guard's model with it (hermes/tools/taint.py)."""
        verdict = await self._judge(user_id, args, context)
        if verdict is not None and verdict.finding is not None:
            metrics.MEMORY_REJECTIONS.labels("scan").inc()
            error = (
                f"Blocked by the security scan ({verdict.finding.describe()}). Nothing was written."
            )
            return ToolOutcome({"success": False, "error": error})
        if verdict is not None and verdict.unavailable is not None:
            held = MemoryPending(
                user_id=user_id,
                args=json.dumps(dict(args), ensure_ascii=False, sort_keys=True),
                actor=actor,
                session_id=session_id,
                message_id=message_id,
                reason=verdict.unavailable,
            )
            kept = await asyncio.to_thread(self.db.memory_log.hold_pending, held, MAX_HELD)
            metrics.MEMORY_REJECTIONS.labels("pending").inc()
            if kept is Held.FULL:
                return ToolOutcome({"success": False, "error": _full(verdict)})
            return ToolOutcome({"success": False, "pending": True, "error": _held(verdict)})
        cleared = args.get("content") if verdict is not None else None
        outcome = await self._write(
            user_id, args, actor, session_id=session_id, message_id=message_id, cleared=cleared
        )
        if verdict is not None:  # the model answers: writes it could not judge are due
            self.request_settle()
        return outcome

    async def _write(
        self,
        user_id: str,
        args: Mapping[str, Any],
        actor: Actor,
        *,
        session_id: str | None,
        message_id: int | None,
        cleared: str | None,
    ) -> ToolOutcome:
        write = functools.partial(
            self._apply,
            user_id,
            args,
            actor,
            session_id=session_id,
            message_id=message_id,
            cleared=cleared,
        )
        user_id, outcome = await asyncio.to_thread(write)
        _count(outcome)
        change = outcome.change
        if change is not None and sweep.crosses_threshold(
            change.used_before,
            change.used_after,
            self.of(user_id).file_store(change.target).limit,
            self.config.consolidation.threshold,
        ):
            self.request_check(user_id)
        return outcome

    async def _judge(
        self, user_id: str, args: Mapping[str, Any], context: str = ""
    ) -> Verdict | None:
        """The model's verdict on new text, off the store's lock (it calls a model); None
        when there is nothing for it to judge: no judge, a removal, or text the rules
        refuse anyway (they run again under the lock, with the store's neighbours). A
        rule that matched only inside quotation marks leaves the meaning to the model."""
        content = args.get("content")
        if self.judge is None or args.get("action") not in ("add", "replace"):
            return None
        if not isinstance(content, str) or not content.strip():
            return None
        ruled = scan(content)
        if ruled is not None and not ruled.quoted:
            return None
        started = time.perf_counter()
        with charged_to(user_id):  # its tokens are the writing person's
            verdict = await self.judge.check(content, context=context)
        metrics.MEMORY_JUDGE_SECONDS.observe(time.perf_counter() - started)
        return verdict

    # -- writes held for the judge ---------------------------------------------------------

    def request_settle(self) -> None:
        """Judge held writes again in the background (once at a time)."""
        if self.judge is None or (self._settling is not None and not self._settling.done()):
            return
        self._settling = asyncio.get_running_loop().create_task(self.settle_pending())

    async def settle_pending(self, user_id: str | None = None) -> PendingReport:
        """Judge the held writes again, oldest first: written when allowed, dropped when
        refused, kept while the model still cannot answer (then the rest wait too)."""
        report = PendingReport()
        due = await asyncio.to_thread(self.db.memory_log.pending_writes, user_id, SETTLE_AT_ONCE)
        for held in due:
            assert held.id is not None
            args = json.loads(held.args)
            verdict = await self._judge(held.user_id, args) if self.judge is not None else None
            if verdict is not None and verdict.unavailable is not None:
                self.db.memory_log.settle_pending(held.id, verdict.unavailable)
                report.waiting += 1
                break
            if verdict is not None and verdict.finding is not None:
                logger.warning(
                    "held memory write of %s refused: %s", held.user_id, verdict.finding.describe()
                )
                metrics.MEMORY_REJECTIONS.labels("scan").inc()
                report.refused += 1
            else:  # allowed, or judged by the rules alone now (the judge was switched off)
                actor = cast(Actor, held.actor)
                cleared = args.get("content") if verdict is not None else None
                outcome = await self._write(
                    held.user_id,
                    args,
                    actor,
                    session_id=held.session_id,
                    message_id=held.message_id,
                    cleared=cleared,
                )
                report.written += outcome.ok
                report.failed += not outcome.ok
            self.db.memory_log.settle_pending(held.id)
        return report

    def _apply(
        self,
        user_id: str,
        args: Mapping[str, Any],
        actor: Actor,
        *,
        session_id: str | None,
        message_id: int | None,
        cleared: str | None = None,
    ) -> tuple[str, ToolOutcome]:
        """The write, under the memory gate, for the person `user_id` is now (a turn that
        began before a link still writes to the merged person); returns that id too."""
        try:
            with self.gated(validate_user_id(user_id)) as person:
                user_id = person  # whom they are now (a link while this waited)
                outcome = run_recorded(
                    MemoryTool(self.of(user_id), cleared),
                    self.db,
                    args,
                    actor=actor,
                    session_id=session_id,
                    message_id=message_id,
                )
        except StoreIOError as exc:  # the memory folder itself cannot be written
            return user_id, ToolOutcome(
                {"success": False, "error": str(exc), "storage_failure": True}
            )
        except StoreBusyError as exc:
            return user_id, ToolOutcome({"success": False, "error": str(exc)})
        change = outcome.change
        if change is not None:
            self.providers.memory_written(
                MemoryWrite(
                    change.action,
                    change.target.value,
                    change.after or "",
                    change.before,
                    user_id,
                    actor,
                    session_id,
                )
            )
        return user_id, outcome

    async def forget(self, user_id: str, text: str, *, session_id: str | None = None) -> str:
        """Remove the one entry (in either store) containing `text`, as the user."""
        memory = self.of(user_id)
        found = [
            (target, entry)
            for target in memory.enabled_targets()
            for entry in memory.store(target).read().entries
            if text in entry
        ]
        if not found:
            return f"Nothing in your memory contains “{text}”."
        if len(found) > 1:
            listed = "\n".join(f"• {display_entry(entry)}" for _, entry in found)
            return f"Several entries contain “{text}”; be more specific:\n{listed}"
        target, entry = found[0]
        args = {"action": "remove", "target": target.value, "old_text": text}
        outcome = await self.apply(user_id, args, actor="user", session_id=session_id)
        if not outcome.ok:
            return str(outcome.result.get("error"))
        return f"Forgotten: “{display_entry(entry)}”. (/memory undo brings it back.)"

    def why(self, user_id: str, text: str, limit: int | None = None) -> list[Change]:
        """Every recorded change of this user's memory that mentions `text`, with its
        conversation and message (settled first, so a crash's leftovers are in it)."""
        self.reconcile(user_id)
        return explain(self.db, user_id, text, limit)

    def users(self) -> list[str]:
        """Everyone with memory, wherever the stores are."""
        return sweep.users_with_memory(self.home, self.config, self.db)

    def over_threshold(self, user_ids: list[str] | None = None) -> list[tuple[str, StoreStatus]]:
        """(user, status) of each store over the threshold (of `user_ids`, else of
        everyone): after a check, the ones waiting out a failed attempt's pause."""
        return [
            (user_id, store)
            for user_id in (self.users() if user_ids is None else user_ids)
            for store in self.status(user_id)
            if store.needs_consolidation
        ]

    def reconcile(self, user_id: str) -> None:
        """Settle what a crash left between this user's stores and their record (and
        record changes made outside Hermes), so `why` and `undo` see the whole story."""
        memory = self.of(user_id)
        for target in memory.enabled_targets():
            reconcile(memory.file_store(target), self.db, user_id)

    def load(self, user_id: str, target: Target, text: str, pending: str = "") -> str:
        """Make a store hold `text` exactly (and `pending` as its waiting entries): an
        import of files written by `export`, or edited by hand. Recorded like every
        change (entry by entry, with the whole before/after for undo), by the admin.
        Raises StoreError when the text is over the store's limit (nothing written)."""
        with self.gated(user_id) as person:
            user_id = person  # whom they are now (a link while this waited)
            self.reconcile(user_id)
            store = self.of(user_id).file_store(target)
            entries, current = fmt.parse(text), store.read()
            if fmt.usage(entries) > store.limit:
                raise StoreError(
                    f"{target.filename} of {user_id} holds {fmt.usage(entries):,} chars, over "
                    f"its limit of {store.limit:,}: shorten it (nothing was imported)"
                )
            if (current.raw, current.pending_raw) == (text, pending):
                return "unchanged"
            before = list(current.entries)
            events = [
                MemoryEventRecord(user_id, target.value, "import", entry, None, "admin")
                for entry in before
                if entry not in entries
            ] + [
                MemoryEventRecord(user_id, target.value, "import", None, entry, "admin")
                for entry in entries
                if entry not in before
            ]
            version = VersionRecord(
                user_id,
                target.value,
                current.raw,
                text,
                "admin",
                reason="import",
                pending_before=current.pending_raw,
                pending_after=pending,
            )
            if not swap_recorded(store, self.db, events, version):
                raise StoreBusyError(f"{store.where} changed during the import; try again")
        self.providers.memory_written(
            MemoryWrite("import", target.value, text, None, user_id, "admin")
        )
        return f"{len(entries)} entries"

    async def undo(self, user_id: str, actor: str = "user") -> tuple[bool, str]:
        """Revert the last change of this user's memory (a consolidation too)."""
        try:
            user_id, version, done, message = await asyncio.to_thread(self._undo, user_id, actor)
        except StoreError as exc:  # busy, or the disk refused
            return False, str(exc)
        if done and version is not None:
            write = MemoryWrite(
                "undo", version.target, version.text_before, version.text_after, user_id, actor
            )
            self.providers.memory_written(write)
        return done, message

    def _undo(self, user_id: str, actor: str) -> tuple[str, MemoryVersion | None, bool, str]:
        with self.gated(user_id) as person:
            user_id = person  # whom they are now (a link while this waited)
            self.reconcile(user_id)
            version = self.db.memory_log.last_version(user_id)
            done, message = undo_last(self.of(user_id), self.db, actor)
        return user_id, version, done, message

    def merge(self, keep: str, gone: str) -> MergeReport:
        """Fold `gone`'s stores into `keep`'s (linking), and every provider's data of
        `gone` (first: a provider that fails stops the link before anything else moved);
        raises MergeError. The caller holds the memory gate exclusively
        (gateway/admission/people.py `link`)."""
        try:
            self.providers.people_merged(keep, gone)
        except ProviderMergeError as exc:
            raise MergeError(f"{exc}; the accounts were not linked, try again") from exc
        report = merge_memory(self.home, self.config, self.db, keep, gone)
        for target in Target if self.providers.active else ():
            if report.added.get(target) or report.waiting.get(target):
                text = self.of(keep).file_store(target).read().raw
                write = MemoryWrite("merge", target.value, text, None, keep, "user")
                self.providers.memory_written(write)
        return report

    # -- consolidation ---------------------------------------------------------------------

    async def check(
        self,
        user_ids: list[str] | None = None,
        *,
        force: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[sweep.StoreRun]:
        """Consolidate each store over the threshold (all stores with `force`)."""
        runs = await sweep.check(
            self.home, self.db, self.model, self.config, user_ids, force=force, progress=progress
        )
        for run in runs:
            metrics.CONSOLIDATIONS.labels(run.outcome.status).inc()
        applied = [run for run in runs if run.outcome.status == "applied"]
        if applied and self.providers.active:
            await self.db.run(self._tell_providers, applied)
        return runs

    def _tell_providers(self, runs: list[sweep.StoreRun]) -> None:
        """The providers hear each consolidated store's new text."""
        for run in runs:
            text = self.of(run.user_id).file_store(run.target).read().raw
            write = MemoryWrite(
                "consolidate", run.target.value, text, None, run.user_id, "consolidator"
            )
            self.providers.memory_written(write)

    def request_check(self, user_id: str) -> None:
        """Check this user's stores in the background (once at a time per user)."""
        if not self.auto_consolidate or user_id in self._checks:
            return
        task = asyncio.get_running_loop().create_task(self.check([user_id]))
        self._checks[user_id] = task
        task.add_done_callback(functools.partial(self._check_done, user_id))

    def _check_done(self, user_id: str, task: asyncio.Task[Any]) -> None:
        self._checks.pop(user_id, None)
        if not task.cancelled() and task.exception() is not None:
            logger.error("consolidation check for %s failed: %s", user_id, task.exception())

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait for background checks and provider calls (before a process exits)."""
        waiting = [*self._checks.values(), *([self._settling] if self._settling else [])]
        if waiting:
            await asyncio.wait(waiting, timeout=timeout)
        await self.providers.drain(timeout)

    async def close(self, timeout: float = 30.0) -> None:
        """For a command or job done with the service: its checks and provider calls
        waited for, then the providers' clients closed (an SDK's connection pool left
        open is an "Unclosed client session" warning at exit); what was not delivered
        stays in the outbox for the gateway."""
        await self.drain(timeout)
        await self.providers.shutdown(min(timeout, 10.0))

    # -- status ----------------------------------------------------------------------------

    def held_writes(self, user_id: str | None = None) -> int:
        """Writes waiting for the guard's model (of one person, or of everyone)."""
        return self.db.memory_log.count_pending(user_id)

    def status(self, user_id: str) -> list[StoreStatus]:
        memory = self.of(user_id)
        consolidation = self.config.consolidation
        threshold = round(consolidation.threshold * 100)
        out = []
        for target in Target:
            if not memory.enabled(target):
                out.append(StoreStatus(target, enabled=False, threshold=threshold))
                continue
            state = memory.file_store(target).read()
            book = self.db.memory_log.consolidation_state(user_id, target.value)
            out.append(
                StoreStatus(
                    target,
                    enabled=True,
                    used=state.used,
                    limit=state.limit,
                    percent=state.percent,
                    entries=len(state.entries),
                    waiting=len(state.pending),
                    last_consolidated_at=book.last_consolidated_at,
                    last_summary=book.last_summary or "",
                    damage=state.damage,
                    needs_consolidation=over_threshold(state.with_pending(), consolidation),
                    last_error=book.last_error,
                    threshold=threshold,
                )
            )
        return out


def _count(outcome: ToolOutcome) -> None:
    """A memory write for the metrics: written (by action), or refused (by reason)."""
    if outcome.change is not None:
        metrics.MEMORY_WRITES.labels(outcome.change.action).inc()
        return
    if outcome.ok:
        return  # nothing to change (a duplicate)
    error = str(outcome.result.get("error", ""))
    if outcome.result.get("storage_failure"):
        reason = "storage"
    elif "security scan" in error:
        reason = "scan"
    elif "limit" in error:
        reason = "full"
    elif "locked" in error or "busy" in error:
        reason = "busy"
    else:
        reason = "invalid"  # no match, several matches, bad arguments, a damaged file
    metrics.MEMORY_REJECTIONS.labels(reason).inc()


__all__ = ["MemoryService", "StoreStatus"]
