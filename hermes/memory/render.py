"""Rendering a store for the system prompt, and how entries are shown to the model.

An entry on disk that fails the security scan is never shown: it becomes a
`[BLOCKED: ...]` placeholder carrying a handle (`blocked:<id>`) that the memory tool
accepts as `old_text`, so the entry stays removable without the model reading it.
"""

from __future__ import annotations

import hashlib

from hermes.memory import entries as fmt
from hermes.memory.scanner import scan
from hermes.memory.store import StoreState, Target

RULE = "═" * 46
BLOCKED_HANDLE_PREFIX = "blocked:"


def blocked_handle(entry: str) -> str:
    return BLOCKED_HANDLE_PREFIX + hashlib.sha256(entry.encode("utf-8", "replace")).hexdigest()[:8]


def display_entry(entry: str) -> str:
    """The entry as the model may see it: itself, or a placeholder if it fails the scan."""
    finding = scan(entry)
    if finding is None:
        return entry
    return (
        f"[BLOCKED: an entry failed the security scan ({finding.category.value}) and is hidden; "
        f'remove it with old_text "{blocked_handle(entry)}"]'
    )


def render(target: Target, state: StoreState) -> str:
    """The snapshot block for one store; an empty store renders nothing."""
    if not state.entries:
        return ""
    header = f"{target.heading} [{state.usage_line()}]"
    shown = [display_entry(entry) for entry in state.entries]
    body = fmt.serialize(shown)
    if state.used > state.limit:  # edited by hand past its limit: keep the prompt bounded
        body = body[: state.limit] + (
            f"\n[... truncated: this store holds {state.used:,} chars, over its "
            f"{state.limit:,} limit; the owner must trim it]"
        )
    return f"{RULE}\n{header}\n{RULE}\n{body}"
