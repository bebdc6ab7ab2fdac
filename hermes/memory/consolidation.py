"""Consolidation: keep a store under its threshold without losing what matters.

1. Read the store under a per-store consolidation lock (held across processes; a second
   run finds it busy and skips). Ask the auxiliary model for a consolidated list that fits
   the target fill: every new entry lists the old entries it came from; every dropped
   entry carries a reason.
2. Validate the whole proposal, rejecting it on any failed check (see `validate`).
3. Write only if the file still has the text read in step 1 (else retry, bounded);
   record the previous text for undo and a memory_event per change (actor consolidator).
4. Leave a one-line notice for the user's next reply, and record the run for status.
With no model, or a failing model or proposal, nothing changes: the store is flagged as
needing consolidation and retried later with backoff.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from hermes.config import ConsolidationConfig
from hermes.llm.client import LLMError
from hermes.llm.types import ChatModel
from hermes.memory import entries as fmt
from hermes.memory.scanner import scan
from hermes.memory.store import MemoryStore, StoreState, Target
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from hermes.state.memory_log import MemoryEventRecord, VersionRecord
from hermes.state.models import utcnow
from hermes.state.search import STOPWORDS

logger = logging.getLogger(__name__)

MAX_RACE_RETRIES = 3
BACKOFF_MINUTES = (10, 30, 120, 360, 1440)
INSTRUCTIONS = """\
You consolidate an assistant's long-term memory store. You get numbered entries.
Return a shorter list that keeps every durable fact:
- merge overlapping entries and compress wording; keep names, numbers, paths exactly;
- never add a fact, word or number that is not in the entries you merge;
- drop an entry only when it is stale or superseded by another entry, and say why;
- entries marked [protected] are the user's explicit instructions or corrections:
  merge them if you like, but never drop them and keep their meaning exactly.
Answer with JSON only:
{"entries": [{"text": "...", "sources": [1, 4]}], "dropped": [{"id": 3, "reason": "..."}]}
Every old id must appear in exactly one new entry's sources or in dropped."""

_PROTECTED = re.compile(
    r"\b(?:don'?t|do not|never|always|must|mustn'?t|should|shouldn'?t|instead|rather than|"
    r"prefer|prefers|preferred|correction|actually|not|no longer|stop|avoid|remember)\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"\d+(?:[.,:/-]\d+)*")
_WORD = re.compile(r"[^\W\d_]+")
_NEGATIONS = ("not", "never", "don't", "dont", "no")
# rewording a merge may need without adding facts
_CONNECTIVES = frozenset(
    "also uses use used prefers prefer likes like has have with and plus via both each "
    "user user's their they them its including incl etc e.g. runs run works".split()
)


@dataclass(frozen=True, slots=True)
class Outcome:
    status: str  # applied | below_threshold | busy | no_model | rejected | failed | raced
    detail: str = ""
    entries_before: int = 0
    entries_after: int = 0
    used_before: int = 0
    used_after: int = 0


@dataclass(frozen=True, slots=True)
class Proposal:
    entries: list[tuple[str, list[int]]]
    dropped: dict[int, str]


class ProposalError(ValueError):
    pass


@contextmanager
def consolidation_lock(store: MemoryStore) -> Iterator[bool]:
    """Non-blocking, cross-process: yields False when another run holds it."""
    store.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = store.path.with_name(store.path.name + ".consolidate.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            yield False
            return
        yield True
    finally:
        os.close(fd)


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
    with consolidation_lock(store) as acquired:
        if not acquired:
            return Outcome("busy", "another consolidation of this store is running")
        outcome = await _consolidate_locked(memory, store, db, model, config, force=force)
    _record(db, memory.user_id, target, outcome, config)
    return outcome


async def _consolidate_locked(
    memory: UserMemory,
    store: MemoryStore,
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
        protected = protected_ids(state, db, memory.user_id, store.target)
        try:
            proposal = await ask(model, state, protected, config)
            validate(proposal, state, protected, config)
        except LLMError as exc:
            return Outcome("failed", f"model failed: {exc}", **base)
        except ProposalError as exc:
            return Outcome("rejected", str(exc), **base)
        new_entries = [text for text, _ in proposal.entries]
        new_text = fmt.serialize(new_entries)
        pending = (read.pending_raw, "") if read.pending else None
        if store.compare_and_swap(state.raw, new_text, pending):
            _journal(db, memory.user_id, store.target, read, proposal, new_text)
            return Outcome(
                "applied", "", len(state.entries), len(new_entries), state.used, len(new_text)
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
    """1-based ids of entries that are explicit user instructions or corrections."""
    by_user = {
        e.entry_after
        for e in db.memory_log.memory_events(user_id)
        if e.actor in ("user", "admin") and e.target == target.value and e.entry_after
    }
    return {
        i
        for i, entry in enumerate(state.entries, 1)
        if entry in by_user or _PROTECTED.search(entry)
    }


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
) -> None:
    """Raise ProposalError naming the first failed check."""
    old = {i: entry for i, entry in enumerate(state.entries, 1)}
    merged = {s for _, sources in proposal.entries for s in sources}
    _check(all(text for text, _ in proposal.entries), "a new entry is empty")
    _check(all(sources for _, sources in proposal.entries), "a new entry lists no sources")
    unknown = (merged | set(proposal.dropped)) - set(old)
    _check(not unknown, f"unknown entry ids {sorted(unknown)}")
    _check(not merged & set(proposal.dropped), "an entry is both merged and dropped")
    missing = set(old) - merged - set(proposal.dropped)
    _check(not missing, f"entries {sorted(missing)} are neither merged nor dropped")
    _check(all(proposal.dropped.values()), "a dropped entry has no reason")
    hit = protected & set(proposal.dropped)
    _check(not hit, f"it drops user instructions or corrections: entries {sorted(hit)}")
    fraction = len(proposal.dropped) / len(old)
    _check(
        fraction <= config.max_drop_fraction,
        f"it drops {fraction:.0%} of entries (max {config.max_drop_fraction:.0%})",
    )
    texts = [text for text, _ in proposal.entries]
    _check(len(set(texts)) == len(texts), "new entries repeat each other")
    used = fmt.usage(texts)
    fits = used <= config.target * state.limit or used < config.threshold * state.limit
    _check(fits, f"the result ({used:,} chars) does not fit under {config.threshold:.0%}")
    for text, sources in proposal.entries:
        _check_entry(text, [old[s] for s in sources], [old[s] for s in sources if s in protected])


def _check_entry(text: str, sources: list[str], protected: list[str]) -> None:
    finding = scan(text)
    _check(
        finding is None, f"a new entry fails the security scan ({finding and finding.describe()})"
    )
    _check(not fmt.has_separator_line(text), "a new entry contains a separator line")
    source_text = "\n".join(sources)
    novel_numbers = set(_NUMBER.findall(text)) - set(_NUMBER.findall(source_text))
    _check(not novel_numbers, f"a new entry introduces numbers {sorted(novel_numbers)}")
    known = {w for w in _WORD.findall(source_text.casefold()) if len(w) > 2}
    novel = [
        w
        for w in _WORD.findall(text.casefold())
        if len(w) > 2 and w not in STOPWORDS and w not in _CONNECTIVES and not _known(w, known)
    ]
    _check(not novel, f"a new entry introduces words not in its sources: {novel[:5]}")
    for original in protected:
        kept_numbers = set(_NUMBER.findall(original)) <= set(_NUMBER.findall(text))
        negated = any(re.search(rf"\b{n}\b", original.casefold()) for n in _NEGATIONS)
        kept_negation = not negated or any(
            re.search(rf"\b{n}\b", text.casefold()) for n in _NEGATIONS
        )
        _check(
            kept_numbers and kept_negation, f"a protected entry lost its meaning: {original[:60]!r}"
        )


def _known(word: str, known: set[str]) -> bool:
    """The word, or a form of it (bed/beds, prefer/preferences), is in the sources."""
    return word in known or any(
        k.startswith(word) or word.startswith(k) or k[:5] == word[:5] for k in known
    )


def _check(ok: bool, problem: str) -> None:
    if not ok:
        raise ProposalError(problem)


def _journal(  # noqa: PLR0917 - one record of one consolidation, every part needed
    db: SessionDB,
    user_id: str,
    target: Target,
    state: StoreState,
    proposal: Proposal,
    new_text: str,
) -> None:
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
    db.memory_log.record_memory_change(events, version)


def _record(
    db: SessionDB, user_id: str, target: Target, outcome: Outcome, config: ConsolidationConfig
) -> None:
    now = utcnow()
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


__all__ = ["Outcome", "consolidate", "due", "over_threshold", "validate"]
