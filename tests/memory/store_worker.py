"""Worker processes for the concurrency and crash tests (run as scripts, not imported)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hermes.config import MemoryConfig
from hermes.memory.store import MemoryStore, StoreState, Target
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory


def churn(home: Path, user_id: str, worker: int, rounds: int) -> None:
    """add, replace, and (for 2 of 3 rounds) remove this worker's own entries: 3 ops a round."""
    tool = MemoryTool(UserMemory(home, user_id, MemoryConfig()))
    for j in range(rounds):
        for args in (
            {"action": "add", "content": f"[p{worker}:e{j}]"},
            {"action": "replace", "old_text": f"[p{worker}:e{j}]", "content": f"[p{worker}:E{j}]"},
            {"action": "remove", "old_text": f"[p{worker}:E{j}]"} if j % 3 else None,
        ):
            if args is None:
                continue
            outcome = tool.run({"target": "memory", **args})
            if not outcome.ok:
                raise SystemExit(f"worker {worker} op failed: {outcome.result}")


def window(i: int, size: int) -> list[str]:
    return [f"[w:{k}]" + " payload" * 40 for k in range(i, i + size)]


def rewrite_forever(path: Path, size: int) -> None:
    """Replace the whole store with window i, i = 1, 2, ... until killed."""
    store = MemoryStore(path, Target.MEMORY, 100_000)
    i = 0

    def next_window(state: StoreState) -> tuple[list[str], None]:
        return window(i, size), None

    while True:
        i += 1
        store.mutate(next_window)
        print(i, flush=True)


def journal_forever(home: Path, user_id: str) -> None:
    """Recorded memory writes (add, and remove the oldest past 60 %) until killed."""
    from hermes.memory.journal import run_recorded
    from hermes.state.db import SessionDB

    db = SessionDB.open(home)
    tool = MemoryTool(UserMemory(home, user_id, MemoryConfig()))
    n = int(time.time() * 1000) % 10_000_000  # unique across restarts
    while True:
        n += 1
        state = tool.memory.store(Target.MEMORY).read()
        if state.percent > 60:
            args = {"action": "remove", "old_text": state.entries[0]}
        else:
            args = {"action": "add", "content": f"fact number {n}"}
        outcome = run_recorded(tool, db, {"target": "memory", **args}, actor="agent")
        if not outcome.ok:
            raise SystemExit(f"op failed: {outcome.result}")
        print(n, flush=True)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "churn":
        churn(Path(rest[0]), rest[1], int(rest[2]), int(rest[3]))
    elif command == "rewrite":
        rewrite_forever(Path(rest[0]), int(rest[1]))
    elif command == "journal":
        journal_forever(Path(rest[0]), rest[1])
