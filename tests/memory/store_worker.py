"""Worker processes for the concurrency and crash tests (run as scripts, not imported)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hermes.config import MemoryConfig
from hermes.memory.store import MemoryStore, StoreState, Target
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB


def _memory(home: Path, user_id: str, url: str) -> tuple[UserMemory, SessionDB]:
    """The person's stores: files beside SQLite (url '-'), rows of PostgreSQL at `url`."""
    db = SessionDB.open(home, None if url == "-" else url)
    config = MemoryConfig(backend="files" if url == "-" else "database")
    return UserMemory(home, user_id, config, db), db


def churn(home: Path, user_id: str, worker: int, rounds: int, url: str) -> None:
    """add, replace, and (for 2 of 3 rounds) remove this worker's own entries: 3 ops a
    round, each recorded with its provenance as the memory service records it."""
    from hermes.memory.journal import run_recorded

    memory, db = _memory(home, user_id, url)
    tool = MemoryTool(memory)
    for j in range(rounds):
        for args in (
            {"action": "add", "content": f"[p{worker}:e{j}]"},
            {"action": "replace", "old_text": f"[p{worker}:e{j}]", "content": f"[p{worker}:E{j}]"},
            {"action": "remove", "old_text": f"[p{worker}:E{j}]"} if j % 3 else None,
        ):
            if args is None:
                continue
            outcome = run_recorded(tool, db, {"target": "memory", **args}, actor="agent")
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


def journal_forever(home: Path, user_id: str, url: str) -> None:
    """Recorded memory writes (add, and remove the oldest past 60 %) until killed."""
    from hermes.memory.journal import run_recorded

    memory, db = _memory(home, user_id, url)
    tool = MemoryTool(memory)
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


def undo_forever(home: Path, user_id: str, url: str) -> None:
    """A recorded add, then its undo (a change decided before the lock, made by
    compare-and-swap), again and again until killed."""
    from hermes.memory.journal import run_recorded
    from hermes.memory.undo import undo_last

    memory, db = _memory(home, user_id, url)
    tool = MemoryTool(memory)
    n = int(time.time() * 1000) % 10_000_000
    while True:
        n += 1
        args = {"target": "memory", "action": "add", "content": f"fact number {n}"}
        if not run_recorded(tool, db, args, actor="agent").ok:
            raise SystemExit("add failed")
        done, message = undo_last(tool.memory, db)
        if not done:
            raise SystemExit(f"undo failed: {message}")
        print(n, flush=True)


def _wait_until(start_at: float) -> None:
    time.sleep(max(0.0, start_at - time.time()))


def link(home: Path, code: str, requester: str, current_user: str, start_at: float) -> None:
    """Redeem a link code at `start_at`, as `requester` (known as `current_user`)."""
    from gateway.admission.people import People
    from gateway.config import HermesConfig
    from hermes.memory.service import MemoryService
    from hermes.state.db import SessionDB

    db = SessionDB.open(home)
    people = People(HermesConfig(), db, MemoryService(home, MemoryConfig(), db))
    _wait_until(start_at)
    outcome = people.link(code, requester=requester, current_user=current_user)
    print(outcome.ok, outcome.message, flush=True)


def remember(home: Path, user_id: str, count: int, start_at: float) -> None:
    """Add `count` entries for `user_id` through the memory service from `start_at`,
    printing each one that was stored."""
    import asyncio

    from hermes.memory.service import MemoryService
    from hermes.state.db import SessionDB

    db = SessionDB.open(home)
    service = MemoryService(home, MemoryConfig(), db, auto_consolidate=False)

    async def run() -> None:
        for i in range(count):
            content = f"late fact {user_id[-4:]} {i}"
            args = {"action": "add", "target": "memory", "content": content}
            outcome = await service.apply(user_id, args, actor="agent")
            if outcome.ok:
                print(content, flush=True)
            await asyncio.sleep(0.01)

    _wait_until(start_at)
    asyncio.run(run())


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "churn":
        churn(Path(rest[0]), rest[1], int(rest[2]), int(rest[3]), rest[4])
    elif command == "rewrite":
        rewrite_forever(Path(rest[0]), int(rest[1]))
    elif command == "journal":
        journal_forever(Path(rest[0]), rest[1], rest[2])
    elif command == "undo":
        undo_forever(Path(rest[0]), rest[1], rest[2])
    elif command == "link":
        link(Path(rest[0]), rest[1], rest[2], rest[3], float(rest[4]))
    elif command == "remember":
        remember(Path(rest[0]), rest[1], int(rest[2]), float(rest[3]))
