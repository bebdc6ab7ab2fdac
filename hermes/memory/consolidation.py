"""Consolidation: keep a store under its threshold without losing what matters.

1. Read the store under a per-store consolidation lock (held across processes; a second
   run finds it busy and skips). Ask the auxiliary model for a consolidated list that fits
   the target fill: every new entry lists the old entries it came from; every dropped
   entry carries a reason.
2. Validate the whole proposal, rejecting it on any failed check (see `validate`): the
   ids add up, nothing is dropped without a reason or beyond the cap, protected entries
   are carried over verbatim (or left out of the proposal, and so kept as they are), and
   every new entry says what its sources said: nothing new, nothing lost, numbers beside
   what they measure, negations and modal words kept with their scope (fidelity.py).
3. Write only if the file still has the text read in step 1 (else retry, bounded);
   record the previous text for undo and a memory_event per change (actor consolidator).
4. Leave a one-line notice for the user's next reply, and record the run for status.
With no model, or a failing model or proposal, nothing changes: the store is flagged as
needing consolidation and retried later with backoff.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from hermes.config import ConsolidationConfig
from hermes.llm.client import LLMError
from hermes.llm.metering import charged_to
from hermes.llm.types import ChatModel
from hermes.memory import entries as fmt
from hermes.memory.fidelity import is_instruction, meaning_changes
from hermes.memory.journal import swap_recorded
from hermes.memory.scanner import scan
from hermes.memory.store import Store, StoreState, Target
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from hermes.state.memory_log import MemoryEventRecord, VersionRecord
from hermes.state.models import ConsolidationRun, utcnow

logger = logging.getLogger(__name__)

MAX_RACE_RETRIES = 3
BACKOFF_MINUTES = (10, 30, 120, 360, 1440)
INSTRUCTIONS = """\
You consolidate an assistant's long-term memory store. You get numbered entries.
Return a shorter list that keeps every durable fact:
- merge overlapping entries and compress wording; keep names, numbers, paths exactly;
- never add a fact, word or number that is not in the entries you merge;
- drop an entry only when it is stale or superseded by another entry, and say why;
- a merged entry keeps every content word and number of each entry it merges, each
  number beside what it measures, and every negation or modal word (not, never, always,
  must, only...) with what it applies to; write in the entries' own language;
- entries marked [protected] are the user's own words, instructions or corrections:
  copy them verbatim as their own entry, or leave them out (they are kept as they are);
  never merge, reword or drop them.
Answer with JSON only:
{"entries": [{"text": "...", "sources": [1, 4]}], "dropped": [{"id": 3, "reason": "..."}]}
Every other old id must appear in exactly one new entry's sources or in dropped."""

# corrections and stated preferences, beside the negations and modal words of fidelity.py
_CORRECTION = re.compile(
    r"\b(?:instead|rather than|prefers?|preferred|correction|actually|no longer|stop|avoid|"
    r"remember|en lugar de|en vez de|prefiere|recuerda|evita|lieber|bevorzugt|statt|anstatt|"
    r"eigentlich|merk dir|préfère|plutôt|au lieu de|souviens|évite|предпочитает|вместо|"
    r"запомни|избегай|на самом деле|invece|ricorda|em vez|lembre)\b"
    r"|대신|선호|기억해|차라리|사실은|更喜欢|更喜歡|而不是|记住|記住|其实|其實|避免|改成|"
    r"代わりに|覚えて|実は|避け",
    re.IGNORECASE,
)
_WRITTEN = ("add", "replace")  # what a person writes (a merge or consolidation is not)


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # applied | below_threshold | busy | no_model | rejected | failed | raced
    detail: str = ""
    entries_before: int = 0
    entries_after: int = 0
    used_before: int = 0
    used_after: int = 0
    version_id: int | None = None  # the change an applied run made


@dataclass(frozen=True, slots=True)
class Proposal:
    entries: list[tuple[str, list[int]]]
    dropped: dict[int, str]


class ProposalError(ValueError):
    pass


def over_threshold(state: StoreState, config: ConsolidationConfig) -> bool:
    return state.used > config.threshold * state.limit


async def consolidate(
    memory: UserMemory,
    target: Target,
    db: SessionDB,
    model: ChatModel | None,
    config: ConsolidationConfig,
    *,
    force: bool = False,
) -> Outcome:
    store = memory.store(target)
    with store.consolidation_claim() as acquired:
        if not acquired:
            return Outcome("busy", "another consolidation of this store is running")
        with charged_to(memory.user_id):  # the model's tokens are the store's person's
            outcome = await _consolidate_locked(memory, store, db, model, config, force=force)
    await db.run(_record, db, memory.user_id, target, outcome, config)
    return outcome


async def _consolidate_locked(
    memory: UserMemory,
    store: Store,
    db: SessionDB,
    model: ChatModel | None,
    config: ConsolidationConfig,
    *,
    force: bool,
) -> Outcome:
    for _ in range(MAX_RACE_RETRIES):
        read = store.read()
        state = read.with_pending()  # entries of a merged account waiting to be folded in
        refusal = _precheck(state, model, config, force=force or bool(read.pending))
        if refusal is not None or model is None:
            return refusal or Outcome("no_model")
        base = {"entries_before": len(state.entries), "used_before": state.used}
        protected = await db.run(protected_ids, state, db, memory.user_id, store.target)
        try:
            proposal = await ask(model, state, protected, config)
            new_entries = validate(proposal, state, protected, config)
        except LLMError as exc:
            return Outcome("failed", f"model failed: {exc}", **base)
        except ProposalError as exc:
            return Outcome("rejected", str(exc), **base)
        new_text = fmt.serialize(new_entries)
        events, version = _record_of(memory.user_id, store.target, read, proposal, new_text)
        logged: list[int] = []
        if await db.run(swap_recorded, store, db, events, version, versions=logged):
            return Outcome(
                "applied",
                "",
                len(state.entries),
                len(new_entries),
                state.used,
                len(new_text),
                logged[-1] if logged else None,
            )
        # the store changed while the model was thinking: start over from a fresh read
    return Outcome("raced", "the store kept changing during consolidation")


def _precheck(
    state: StoreState, model: ChatModel | None, config: ConsolidationConfig, *, force: bool
) -> Outcome | None:
    base = {"entries_before": len(state.entries), "used_before": state.used}
    if state.damage:
        return Outcome("failed", f"the file needs fixing by hand: {state.damage}", **base)
    if not force and not over_threshold(state, config):
        return Outcome("below_threshold", f"{state.percent}% full", **base)
    if len(state.entries) < 2:
        return Outcome("failed", "a single entry cannot be consolidated", **base)
    if model is None:
        return Outcome("no_model", "no auxiliary model is configured", **base)
    return None


def protected_ids(state: StoreState, db: SessionDB, user_id: str, target: Target) -> set[int]:
    """1-based ids of entries that are the user's own words (written with `hermes memory
    add` or `/memory`), instructions (must, always, never...) or corrections."""
    by_user = {
        e.entry_after
        for e in db.memory_log.memory_events(user_id)
        if e.actor in ("user", "admin")
        and e.action in _WRITTEN
        and e.target == target.value
        and e.entry_after
    }
    return {
        i for i, entry in enumerate(state.entries, 1) if entry in by_user or is_protected(entry)
    }


def is_protected(entry: str) -> bool:
    """An instruction (must, always, never...) or a correction, whoever wrote it."""
    return bool(_CORRECTION.search(entry)) or is_instruction(entry)


async def ask(
    model: ChatModel, state: StoreState, protected: set[int], config: ConsolidationConfig
) -> Proposal:
    lines = [
        f"{i}. {'[protected] ' if i in protected else ''}{entry}"
        for i, entry in enumerate(state.entries, 1)
    ]
    budget = int(config.target * state.limit)
    prompt = (
        f"The store holds {state.used:,} of {state.limit:,} characters. Consolidate it to at "
        f"most {budget:,} characters in total (entries are joined by 3-character "
        f"separators).\n\n" + "\n".join(lines)
    )
    messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": prompt}]
    reply = await model.chat(messages, None, temperature=0.1)
    return parse(reply.content or "")


def parse(text: str) -> Proposal:
    body = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", body, re.DOTALL)
    if fence:
        body = fence.group(1)
    try:
        data: Any = json.loads(body)
        entries = [
            (str(item["text"]).strip(), [int(s) for s in item["sources"]])
            for item in data["entries"]
        ]
        dropped = {
            int(item["id"]): str(item.get("reason") or "").strip()
            for item in data.get("dropped", [])
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise ProposalError(f"the model's answer is not the expected JSON ({exc})") from None
    return Proposal(entries, dropped)


def validate(
    proposal: Proposal, state: StoreState, protected: set[int], config: ConsolidationConfig
) -> list[str]:
    """The store's new entries, or ProposalError naming the first failed check.

    Protected entries the proposal leaves out are kept verbatim, in their place."""
    old = {i: entry for i, entry in enumerate(state.entries, 1)}
    listed = [s for _, sources in proposal.entries for s in sources]
    merged = set(listed)
    _check(all(text for text, _ in proposal.entries), "a new entry is empty")
    _check(all(sources for _, sources in proposal.entries), "a new entry lists no sources")
    unknown = (merged | set(proposal.dropped)) - set(old)
    _check(not unknown, f"unknown entry ids {sorted(unknown)}")
    twice = sorted({s for s in listed if listed.count(s) > 1})
    _check(not twice, f"entries {twice} are merged into more than one new entry")
    _check(not merged & set(proposal.dropped), "an entry is both merged and dropped")
    hit = protected & set(proposal.dropped)
    _check(not hit, f"it drops user instructions or corrections: entries {sorted(hit)}")
    for text, sources in proposal.entries:
        touched = sorted(protected & set(sources))
        _check(
            not touched or (sources == touched[:1] and text == old[touched[0]]),
            f"it rewrites a protected entry (the user's own words, an instruction or a "
            f"correction): {old[touched[0]][:60]!r}"
            if touched
            else "",
        )
    missing = set(old) - merged - set(proposal.dropped) - protected
    _check(not missing, f"entries {sorted(missing)} are neither merged nor dropped")
    _check(all(proposal.dropped.values()), "a dropped entry has no reason")
    fraction = len(proposal.dropped) / len(old)
    _check(
        fraction <= config.max_drop_fraction,
        f"it drops {fraction:.0%} of entries (max {config.max_drop_fraction:.0%})",
    )
    texts = _with_kept(proposal, old, protected - merged)
    _check(len(set(texts)) == len(texts), "new entries repeat each other")
    used = fmt.usage(texts)
    fits = used <= config.target * state.limit or used < config.threshold * state.limit
    _check(fits, f"the result ({used:,} chars) does not fit under {config.threshold:.0%}")
    for text, sources in proposal.entries:
        _check_entry(text, [old[s] for s in sources])
    return texts


def _with_kept(proposal: Proposal, old: dict[int, str], kept: set[int]) -> list[str]:
    """The proposal's entries with the protected ones it left out, each before the first
    new entry made from a later entry (so they stay about where they were)."""
    waiting = sorted(kept)
    out: list[str] = []
    for text, sources in proposal.entries:
        while waiting and waiting[0] < min(sources):
            out.append(old[waiting.pop(0)])
        out.append(text)
    out += [old[i] for i in waiting]
    return out


def _check_entry(text: str, sources: list[str]) -> None:
    finding = scan(text)
    _check(
        finding is None, f"a new entry fails the security scan ({finding and finding.describe()})"
    )
    _check(not fmt.has_separator_line(text), "a new entry contains a separator line")
    if sources == [text]:
        return  # carried over as it was
    changes = meaning_changes(text, sources)
    _check(not changes, f"a new entry {changes[0]}" if changes else "")


def _check(ok: bool, problem: str) -> None:
    if not ok:
        raise ProposalError(problem)


def _record_of(
    user_id: str, target: Target, state: StoreState, proposal: Proposal, new_text: str
) -> tuple[list[MemoryEventRecord], VersionRecord]:
    """The events and version a consolidation is recorded with."""
    old = {i: entry for i, entry in enumerate(state.with_pending().entries, 1)}
    events = [
        MemoryEventRecord(
            user_id,
            target.value,
            "consolidate",
            fmt.serialize(old[s] for s in sources),
            text,
            "consolidator",
        )
        for text, sources in proposal.entries
        if [old[s] for s in sources] != [text]
    ]
    events += [
        MemoryEventRecord(user_id, target.value, "drop", old[i], None, "consolidator")
        for i in proposal.dropped
    ]
    reason = json.dumps(
        {"dropped": [{"entry": old[i], "reason": r} for i, r in proposal.dropped.items()]},
        ensure_ascii=False,
    )
    version = VersionRecord(user_id, target.value, state.raw, new_text, "consolidator", reason)
    if state.pending:
        version = replace(version, pending_before=state.pending_raw, pending_after="")
    return events, version


def _record(
    db: SessionDB, user_id: str, target: Target, outcome: Outcome, config: ConsolidationConfig
) -> None:
    now = utcnow()
    if outcome.status not in ("below_threshold", "busy"):  # a proposal's fate, for history
        db.memory_log.log_consolidation(
            ConsolidationRun(
                user_id=user_id,
                target=target.value,
                at=now,
                status=outcome.status,
                detail=outcome.detail[:1000],
                entries_before=outcome.entries_before,
                entries_after=outcome.entries_after,
                used_before=outcome.used_before,
                used_after=outcome.used_after,
                version_id=outcome.version_id,
            )
        )
    if outcome.status == "applied":
        summary = (
            f"{outcome.entries_before} → {outcome.entries_after} entries, "
            f"{outcome.used_before:,} → {outcome.used_after:,} chars"
        )
        notice = None
        if config.notify == "on":
            notice = (
                f"(I tidied your {target.noun.lower()}: {summary}. Say /memory undo to revert.)"
            )
        db.memory_log.update_consolidation_state(
            user_id,
            target.value,
            needs_consolidation=False,
            attempts=0,
            last_error=None,
            next_attempt_at=None,
            last_attempt_at=now,
            last_consolidated_at=now,
            last_summary=summary,
            notice_pending=notice,
        )
    elif outcome.status in ("no_model", "rejected", "failed", "raced"):
        state = db.memory_log.consolidation_state(user_id, target.value)
        attempts = state.attempts + 1
        wait = BACKOFF_MINUTES[min(attempts, len(BACKOFF_MINUTES)) - 1]
        db.memory_log.update_consolidation_state(
            user_id,
            target.value,
            needs_consolidation=True,
            attempts=attempts,
            last_attempt_at=now,
            next_attempt_at=now + timedelta(minutes=wait),
            last_error=f"{outcome.status}: {outcome.detail}"[:500],
        )
        logger.warning(
            "consolidation of %s/%s: %s (%s)", user_id, target.value, outcome.status, outcome.detail
        )


def due(db: SessionDB, user_id: str, target: Target) -> bool:
    """False while a failed store waits out its backoff."""
    state = db.memory_log.consolidation_state(user_id, target.value)
    return state.next_attempt_at is None or state.next_attempt_at <= utcnow()


__all__ = [
    "Outcome",
    "ProposalError",
    "consolidate",
    "due",
    "is_protected",
    "over_threshold",
    "parse",
    "validate",
]
