"""Memory write throughput and latency on a near-full store, side by side with the peer.

    .venv/bin/python bench/memory_ops.py [--ops 2000] [--rounds 20] [--json] [--peer PYTHON]

Three ways of writing, the same operations on the same kind of store (about 87 % of
the 2,200-char limit; every add is paired with a replace and a remove, so the fill
level stays put), taking turns in slices (`--rounds`) so that the machine's slow
spells fall on all of them alike:

- tool: MemoryTool.run, the file write (the rules scan of the entry and of the store
  around it, the lock, re-read, decide, temp file, fsync, os.replace);
- service: MemoryService.apply with the judge off, the whole write path of the gateway
  (the tool, plus provenance in state.db, which undo and `memory why` read);
- peer: hermes-agent's `tools.memory_tool.MemoryStore` (add/replace/remove), driven in
  a child process by `--peer PYTHON`, an interpreter with `pip install
  hermes-agent==0.19.0` (nothing of it is shipped here).

With `--postgres URL` (a database the bench may create a schema in, e.g.
postgresql://postgres@127.0.0.1:5432/postgres): the same tool and service writers with
`memory.backend: database` on PostgreSQL (the store a row, each write one transaction
with its provenance), beside the files.

Also: the rules stage alone (scan of the new entry and of the store with it) per write.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

from hermes.config import MemoryConfig
from hermes.identity import new_user_id
from hermes.memory import entries as fmt
from hermes.memory.scanner import scan, scan_together
from hermes.memory.service import MemoryService
from hermes.memory.store import Target
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB

SEED = "Seed fact {k}: " + "x" * 80
ACTIONS = ("add", "replace", "remove")


def operations(i: int) -> list[tuple[str, dict[str, str]]]:
    tag = f"bench-{i}"
    return [
        ("add", {"content": f"Bench fact {tag}: prefers x"}),
        ("replace", {"old_text": tag, "content": f"Bench fact {tag}: prefers y"}),
        ("remove", {"old_text": tag}),
    ]


def near_full_store(home: Path, db: SessionDB | None = None) -> tuple[MemoryTool, UserMemory]:
    config = MemoryConfig(backend="database" if db is not None else "files")
    memory = UserMemory(home, new_user_id(), config, db)
    tool = MemoryTool(memory)
    k = 0
    while fmt.usage(memory.store(Target.MEMORY).read().entries) < 0.85 * 2200:
        tool.run({"action": "add", "target": "memory", "content": SEED.format(k=k)})
        k += 1
    return tool, memory


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else 0


def summary(timings: dict[str, list[float]]) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for action, values in timings.items():
        report[action] = {
            "ops_per_second": round(1000 / statistics.fmean(values)),
            "p50_ms": round(percentile(values, 50), 3),
            "p99_ms": round(percentile(values, 99), 3),
        }
    return report


class Writer(Protocol):
    """One way of writing, set up once on its own near-full store; `run` does the
    operations of rounds start..start+count and returns each one's time in ms."""

    def run(self, start: int, count: int) -> dict[str, list[float]]: ...

    def close(self) -> None: ...


class ToolWriter:
    def __init__(self, url: str | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.db = SessionDB.open(Path(self._tmp.name), url) if url else None
        self.tool, self.memory = near_full_store(Path(self._tmp.name), self.db)

    def run(self, start: int, count: int) -> dict[str, list[float]]:
        timings: dict[str, list[float]] = {action: [] for action in ACTIONS}
        for i in range(start, start + count):
            for action, args in operations(i):
                call = {"action": action, "target": "memory", **args}
                started = time.perf_counter()
                ok = self.tool.run(call).ok
                timings[action].append((time.perf_counter() - started) * 1000)
                assert ok, (action, args)
        return timings

    def fill_percent(self) -> int:
        return self.memory.store(Target.MEMORY).read().percent

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
        self._tmp.cleanup()


class ServiceWriter:
    """MemoryService.apply in one event loop kept across rounds, as in the gateway."""

    def __init__(self, url: str | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        home = Path(self._tmp.name)
        self.db = SessionDB.open(home, url)
        _, self.memory = near_full_store(home, self.db if url else None)
        config = self.memory.config
        self.service = MemoryService(home, config, self.db, auto_consolidate=False)
        self.loop = asyncio.new_event_loop()

    def run(self, start: int, count: int) -> dict[str, list[float]]:
        async def writes() -> dict[str, list[float]]:
            timings: dict[str, list[float]] = {action: [] for action in ACTIONS}
            for i in range(start, start + count):
                for action, args in operations(i):
                    call = {"action": action, "target": "memory", **args}
                    started = time.perf_counter()
                    outcome = await self.service.apply(self.memory.user_id, call, actor="agent")
                    timings[action].append((time.perf_counter() - started) * 1000)
                    assert outcome.ok, (action, args)
            return timings

        return self.loop.run_until_complete(writes())

    def close(self) -> None:
        self.loop.close()
        self.db.close()
        self._tmp.cleanup()


def measure_rules(ops: int) -> dict[str, Any]:
    """The rules stage of one write: the entry, then the store with it, as the tool
    runs them (a new entry each time: nothing is cached)."""
    with tempfile.TemporaryDirectory() as tmp:
        _, memory = near_full_store(Path(tmp))
        entries = list(memory.store(Target.MEMORY).read().entries)
    values = []
    for i in range(ops):
        entry = f"Bench fact bench-{i}: prefers x"
        started = time.perf_counter()
        scan(entry)
        scan_together([*entries, entry], entries)
        values.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": round(percentile(values, 50), 3), "p99_ms": round(percentile(values, 99), 3)}


# The peer's MemoryStore in a child process that stays up: each line "start count" on
# its stdin runs those rounds and answers one line of JSON timings.
PEER_DRIVER = """
import json, os, sys, tempfile, time
home = tempfile.mkdtemp()
os.environ["HERMES_HOME"] = home
from tools.memory_tool import MemoryStore
store = MemoryStore(memory_char_limit=2200, user_char_limit=1375)
store.load_from_disk()
k = 0
while len("\\n§\\n".join(store.memory_entries)) < 0.85 * 2200:
    store.add("memory", "Seed fact %d: " % k + "x" * 80)
    k += 1
print("ready", flush=True)
for line in sys.stdin:
    start, count = map(int, line.split())
    timings = {"add": [], "replace": [], "remove": []}
    for i in range(start, start + count):
        tag = "bench-%d" % i
        for action, call in (
            ("add", lambda: store.add("memory", "Bench fact %s: prefers x" % tag)),
            ("replace", lambda: store.replace("memory", tag, "Bench fact %s: prefers y" % tag)),
            ("remove", lambda: store.remove("memory", tag)),
        ):
            started = time.perf_counter()
            result = call()
            timings[action].append((time.perf_counter() - started) * 1000)
            assert result.get("success"), result
    print(json.dumps(timings), flush=True)
"""


class PeerWriter:
    def __init__(self, python: str) -> None:
        self.child = subprocess.Popen(
            [python, "-c", PEER_DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.child.stdout is not None and self.child.stdout.readline().strip() == "ready"

    def run(self, start: int, count: int) -> dict[str, list[float]]:
        assert self.child.stdin is not None and self.child.stdout is not None
        self.child.stdin.write(f"{start} {count}\n")
        self.child.stdin.flush()
        timings: dict[str, list[float]] = json.loads(self.child.stdout.readline())
        return timings

    def close(self) -> None:
        if self.child.stdin is not None:
            self.child.stdin.close()
        self.child.wait(timeout=30)


def interleaved(writers: dict[str, Writer], ops: int, rounds: int) -> dict[str, Any]:
    """Each writer's ops in `rounds` slices, the writers taking turns (the order turned
    each round), so a slow spell of the machine or its disk falls on all of them alike
    rather than on whichever happened to run then."""
    timings: dict[str, dict[str, list[float]]] = {
        name: {action: [] for action in ACTIONS} for name in writers
    }
    names = list(writers)
    size = -(-ops // rounds)
    for r, start in enumerate(range(0, ops, size)):
        count = min(size, ops - start)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            for action, values in writers[name].run(start, count).items():
                timings[name][action].extend(values)
    return {name: summary(values) for name, values in timings.items()}


def scratch_schema(url: str) -> tuple[str, str]:
    """A new schema in the database at `url`: (its name, a URL whose sessions use it)."""
    import os
    from urllib.parse import quote

    import psycopg

    name = f"bench_memory_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    joiner = "&" if "?" in url else "?"
    return name, f"{url}{joiner}options={quote(f'-csearch_path={name},public')}"


def drop_schema(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def transactions_per_write(admin_url: str, url: str, ops: int = 50) -> dict[str, float]:
    """The service's writes on PostgreSQL: transactions begun per write (reads too), and
    the writing ones (the server's transaction-id counter moves once for each)."""
    import psycopg
    from sqlalchemy import event

    writer = ServiceWriter(url)
    begun = [0]

    def counted(_conn: Any) -> None:
        begun[0] += 1

    def xid() -> int:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        return int(row[0]) if row else 0

    try:
        writer.run(0, 5)  # warm: the person and their store exist
        event.listen(writer.db.engine, "begin", counted)
        before = xid()
        writer.run(5, ops)
        writing = xid() - before - 1  # (the counter's own read took one)
    finally:
        writer.close()
    writes = ops * len(ACTIONS)
    return {"all": round(begun[0] / writes, 2), "writing": round(writing / writes, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=20, help="slices the writers take turns in")
    parser.add_argument("--peer", metavar="PYTHON", help="a Python with hermes-agent installed")
    parser.add_argument("--postgres", metavar="URL", help="also on PostgreSQL (a scratch schema)")
    args = parser.parse_args()
    report: dict[str, Any] = {"ops_per_action": args.ops}
    report["rules_per_write"] = measure_rules(args.ops)
    tool = ToolWriter()
    writers: dict[str, Writer] = {"tool": tool, "service": ServiceWriter()}
    if args.peer:
        writers["peer"] = PeerWriter(args.peer)
    schema = scratch_schema(args.postgres) if args.postgres else None
    if schema is not None:
        writers["tool (postgresql)"] = ToolWriter(schema[1])
        writers["service (postgresql)"] = ServiceWriter(schema[1])
    try:
        report.update(interleaved(writers, args.ops, args.rounds))
        report["tool"]["store_fill_percent"] = tool.fill_percent()
    finally:
        for writer in writers.values():
            writer.close()
        if schema is not None:
            drop_schema(args.postgres, schema[0])
    if args.postgres:
        schema = scratch_schema(args.postgres)
        try:
            report["postgresql_transactions_per_write"] = transactions_per_write(
                args.postgres, schema[1]
            )
        finally:
            drop_schema(args.postgres, schema[0])
    if args.json:
        print(json.dumps(report))
        return
    rules = report["rules_per_write"]
    print(f"{args.ops} ops per action on a store at {report['tool']['store_fill_percent']}%")
    print(f"rules stage per write: p50 {rules['p50_ms']:.3f} ms, p99 {rules['p99_ms']:.3f} ms")
    print("| writer | add ops/s | replace ops/s | remove ops/s | add p50 ms | add p99 ms |")
    print("|---|---|---|---|---|---|")
    for name in ("tool", "service", "tool (postgresql)", "service (postgresql)", "peer"):
        if name in report:
            r = report[name]
            print(
                f"| {name} | {r['add']['ops_per_second']:,} | {r['replace']['ops_per_second']:,} "
                f"| {r['remove']['ops_per_second']:,} | {r['add']['p50_ms']:.3f} "
                f"| {r['add']['p99_ms']:.3f} |"
            )
    if (counted := report.get("postgresql_transactions_per_write")) is not None:
        print(
            f"PostgreSQL, the service: {counted['all']} transactions per write "
            f"({counted['writing']} of them writing)"
        )


if __name__ == "__main__":
    main()
