"""Memory writes with provenance: every applied change is recorded in state.db.

The tool, the CLI and (later) admin commands and consolidation all write through
`run_recorded`, so `hermes memory why TEXT` can say which conversation produced an entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from hermes.memory.tool import MemoryTool, ToolOutcome
from hermes.state.db import SessionDB
from hermes.state.memory_log import MemoryEventRecord, VersionRecord

Actor = Literal["agent", "user", "admin", "consolidator"]


def run_recorded(
    tool: MemoryTool,
    db: SessionDB,
    args: Mapping[str, Any],
    *,
    actor: Actor,
    session_id: str | None = None,
    message_id: int | None = None,
) -> ToolOutcome:
    outcome = tool.run(args)
    change = outcome.change
    if change is not None:
        user_id = tool.memory.user_id
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
        db.memory_log.record_memory_change([event], version)
    return outcome
