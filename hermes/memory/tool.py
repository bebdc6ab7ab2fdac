"""The `memory` tool: add / replace / remove entries by unique substring.

There is no read action: memory is in the system prompt. Every answer reflects the
live state on disk, never the session's frozen snapshot. The CLI goes through the same
`MemoryTool.run`, so the same checks apply everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hermes.memory import entries as fmt
from hermes.memory.render import BLOCKED_HANDLE_PREFIX, blocked_handle, display_entry
from hermes.memory.scanner import scan, scan_together
from hermes.memory.store import StoreError, StoreIOError, StoreState, Target
from hermes.memory.user_memory import UserMemory

ACTIONS = ("add", "replace", "remove")
DUPLICATE_MESSAGE = "Entry already exists (no duplicate added)."
PREVIEW_CHARS = 60

MEMORY_TOOL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "memory",
        "description": (
            "Save durable facts to your persistent memory, which is shown in your system "
            "prompt at the start of every session. target 'user' is the user profile (who "
            "they are, preferences, corrections about them); target 'memory' is your own "
            "notes (environment facts, conventions, lessons). add: a new dense, declarative "
            "entry. replace: old_text is a short unique substring of one entry; that whole "
            "entry becomes content. remove: deletes the entry containing old_text. Changes "
            "are saved at once but appear in the prompt from the next session."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": list(ACTIONS)},
                "target": {"type": "string", "enum": [t.value for t in Target]},
                "content": {
                    "type": "string",
                    "description": "The entry text (add, replace).",
                },
                "old_text": {
                    "type": "string",
                    "description": (
                        "Short substring identifying exactly one entry (replace, remove)."
                    ),
                },
            },
            "required": ["action", "target"],
            "additionalProperties": False,
        },
    },
}

Result = dict[str, Any]


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """One applied change, for the provenance trail (before/after are whole entries)."""

    target: Target
    action: str
    before: str | None
    after: str | None
    used_before: int
    used_after: int
    file_before: str = ""  # the whole store text before and after, for exact undo
    file_after: str = ""


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    result: Result
    change: MemoryChange | None = None

    @property
    def ok(self) -> bool:
        return bool(self.result.get("success"))


class MemoryTool:
    name = "memory"
    schema = MEMORY_TOOL_SCHEMA

    def __init__(self, memory: UserMemory, cleared: str | None = None) -> None:
        """`cleared`: content the memory guard's model judged safe; a rule that matched it
        only inside quotation marks (a note quoting an attack) does not refuse it."""
        self.memory = memory
        self.cleared = cleared

    def run(
        self,
        args: Mapping[str, Any],
        before_write: Callable[[ToolOutcome], None] | None = None,
        before_decide: Callable[[Target, StoreState], None] | None = None,
        after_write: Callable[[], None] | None = None,
    ) -> ToolOutcome:
        """Apply one operation. Under the store's lock, `before_decide` sees the fresh
        state first, `before_write` a change before the store's text is replaced and
        `after_write` once it is (the journal settles, records and completes there)."""
        try:
            action, target, content, old_text = _parse_args(args)
            store = self.memory.store(target)
            op = _Operation(action, target, content, old_text, content == self.cleared)

            def decide(state: StoreState) -> Decision:
                if before_decide is not None:
                    before_decide(target, state)
                return op.decide(state)

            return store.mutate(decide, before_write, after_write)
        except StoreIOError as exc:  # the disk refused: say so, and that it may pass
            return ToolOutcome(_error(str(exc), storage_failure=True))
        except (StoreError, _UsageError) as exc:
            return ToolOutcome(_error(str(exc)))


class _UsageError(Exception):
    pass


def _parse_args(args: Mapping[str, Any]) -> tuple[str, Target, str, str]:
    action = args.get("action")
    if action not in ACTIONS:
        raise _UsageError(f"Unknown action {action!r}; use one of: {', '.join(ACTIONS)}.")
    try:
        target = Target(str(args.get("target")))
    except ValueError:
        raise _UsageError(
            f"Unknown target {args.get('target')!r}; use 'memory' or 'user'."
        ) from None
    content, old_text = args.get("content") or "", args.get("old_text") or ""
    if not isinstance(content, str) or not isinstance(old_text, str):
        raise _UsageError("'content' and 'old_text' must be strings.")
    return action, target, _normalize(content), old_text.strip()


def _normalize(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


class _RefusedError(Exception):
    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.result = _error(message, **extra)


Decision = tuple[list[str] | None, ToolOutcome]


@dataclass(frozen=True, slots=True)
class _Operation:
    action: str
    target: Target
    content: str
    old_text: str
    cleared: bool = False  # the content was judged safe by the guard's model

    def decide(self, state: StoreState) -> Decision:
        """Runs under the store's lock on the freshly read state."""
        try:
            if self.action == "add":
                return self._add(state)
            index = self._find(state)
            if self.action == "remove":
                return self._remove(state, index)
            return self._replace(state, index)
        except _RefusedError as refusal:
            return None, ToolOutcome(refusal.result)

    def _add(self, state: StoreState) -> Decision:
        _check_content(self.content, "add", self.cleared)
        if self.content in state.entries:
            return None, ToolOutcome(_success(self.target, state, DUPLICATE_MESSAGE))
        new = [*state.entries, self.content]
        if fmt.usage(new) > state.limit:
            raise _RefusedError(
                f"{self.target.noun} at {state.used:,}/{state.limit:,} chars. Adding this "
                f"entry ({len(self.content):,} chars) would exceed the limit. Replace or "
                f"remove existing entries first.",
                current_entries=_shown(state),
                usage=f"{state.used:,}/{state.limit:,}",
            )
        _check_together(new, state.entries, self.cleared)
        return new, self._applied(state, new, None, self.content, "Entry added.")

    def _find(self, state: StoreState) -> int:
        """The index of the one entry `old_text` identifies."""
        if not self.old_text:
            raise _RefusedError(
                f"'old_text' is required for {self.action}: a short unique substring."
            )
        if self.action == "replace":
            _check_content(self.content, "replace", self.cleared)
        matches = _matching(state.entries, self.old_text)
        if not matches:
            raise _RefusedError(
                f"No entry matched '{self.old_text}'.",
                current_entries=_shown(state),
                usage=f"{state.used:,}/{state.limit:,}",
            )
        if len(matches) > 1:
            raise _RefusedError(
                f"Multiple entries matched '{self.old_text}'. Be more specific.",
                matches=[_preview(display_entry(state.entries[i])) for i in matches],
            )
        return matches[0]

    def _remove(self, state: StoreState, index: int) -> Decision:
        new = [e for i, e in enumerate(state.entries) if i != index]
        return new, self._applied(state, new, state.entries[index], None, "Entry removed.")

    def _replace(self, state: StoreState, index: int) -> Decision:
        entries = list(state.entries)
        entries[index] = self.content
        new = fmt.dedupe(entries)
        if fmt.usage(new) > state.limit:
            raise _RefusedError(
                f"{self.target.noun} at {state.used:,}/{state.limit:,} chars. Replacing this "
                f"entry would bring it to {fmt.usage(new):,} chars, over the limit. "
                f"Shorten the new content or remove other entries first.",
                usage=f"{state.used:,}/{state.limit:,}",
            )
        _check_together(new, state.entries, self.cleared)
        old = state.entries[index]
        return new, self._applied(state, new, old, self.content, "Entry replaced.")

    def _applied(
        self, state: StoreState, new: list[str], before: str | None, after: str | None, msg: str
    ) -> ToolOutcome:
        after_state = StoreState(tuple(new), state.limit)
        change = MemoryChange(
            self.target,
            self.action,
            before,
            after,
            state.used,
            after_state.used,
            file_before=state.raw,
            file_after=fmt.serialize(new),
        )
        return ToolOutcome(_success(self.target, after_state, msg), change)


def _check_together(new: list[str], before: tuple[str, ...], cleared: bool) -> None:
    """The store as it would be after the write, scanned as a whole: an attack split
    over two entries is as blocked as one written in one."""
    finding = scan_together(new, before)
    if finding and not (cleared and finding.quoted):
        raise _RefusedError(
            f"Blocked by the security scan ({finding.describe()}). Nothing was written."
        )


def _matching(entries: tuple[str, ...], old_text: str) -> list[int]:
    if old_text.startswith(BLOCKED_HANDLE_PREFIX):
        return [i for i, e in enumerate(entries) if blocked_handle(e) == old_text]
    return [i for i, e in enumerate(entries) if old_text in e]


def _check_content(content: str, action: str, cleared: bool) -> None:
    if not content:
        if action == "replace":
            raise _RefusedError("'content' is empty. To delete the entry, use action 'remove'.")
        raise _RefusedError("'content' is empty; nothing to add.")
    if fmt.has_separator_line(content):
        raise _RefusedError(
            "'content' may not contain a line holding only '§' (it separates entries)."
        )
    finding = scan(content)
    if finding and not (cleared and finding.quoted):
        raise _RefusedError(
            f"Blocked by the security scan ({finding.describe()}). Nothing was written."
        )


def _shown(state: StoreState) -> list[str]:
    return [display_entry(entry) for entry in state.entries]


def _preview(entry: str) -> str:
    return entry if len(entry) <= PREVIEW_CHARS else entry[: PREVIEW_CHARS - 1] + "…"


def _success(target: Target, state: StoreState, message: str) -> Result:
    return {
        "success": True,
        "target": target.value,
        "message": message,
        "usage": state.usage_line(),
        "entry_count": len(state.entries),
    }


def _error(message: str, **extra: Any) -> Result:
    return {"success": False, "error": message, **extra}
