"""Memory write throughput and latency on a near-full store, side by side with the peer.

    .venv/bin/python bench/memory_ops.py [--ops 2000] [--json] [--peer PYTHON]

Three ways of writing, the same operations on the same kind of store (about 87 % of
the 2,200-char limit; every add is paired with a replace and a remove, so the fill
level stays put):

- tool: MemoryTool.run, the file write (the rules scan of the entry and of the store
  around it, the lock, re-read, decide, temp file, fsync, os.replace, fsync of the
  folder);
- service: MemoryService.apply with the judge off, the whole write path of the gateway
  (the tool, plus provenance in state.db, which undo and `memory why` read);
- peer: hermes-agent's `tools.memory_tool.MemoryStore` (add/replace/remove), driven in
  a child process by `--peer PYTHON`, an interpreter with `pip install
  hermes-agent==0.19.0` (nothing of it is shipped here).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def near_full_store(home: Path) -> tuple[MemoryTool, UserMemory]:
    memory = UserMemory(home, new_user_id(), MemoryConfig())
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


def timed(ops: int, run: Callable[[str, dict[str, str]], bool]) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {action: [] for action in ACTIONS}
    for i in range(ops):
        for action, args in operations(i):
            started = time.perf_counter()
            ok = run(action, args)
            timings[action].append((time.perf_counter() - started) * 1000)
            assert ok, (action, args)
    return timings


def measure_tool(ops: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        tool, memory = near_full_store(Path(tmp))
        timings = timed(ops, lambda a, args: tool.run({"action": a, "target": "memory", **args}).ok)
        fill = memory.store(Target.MEMORY).read().percent
    return {"store_fill_percent": fill, **summary(timings)}


def measure_service(ops: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _, memory = near_full_store(home)
        db = SessionDB.open(home)
        service = MemoryService(home, MemoryConfig(), db, auto_consolidate=False)

        async def writes() -> dict[str, list[float]]:  # in one running loop, as the gateway
            timings: dict[str, list[float]] = {action: [] for action in ACTIONS}
            for i in range(ops):
                for action, args in operations(i):
                    call = {"action": action, "target": "memory", **args}
                    started = time.perf_counter()
                    outcome = await service.apply(memory.user_id, call, actor="agent")
                    timings[action].append((time.perf_counter() - started) * 1000)
                    assert outcome.ok, (action, args)
            return timings

        try:
            return summary(asyncio.run(writes()))
        finally:
            db.close()


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


PEER_DRIVER = """
import json, os, sys, tempfile, time
home = tempfile.mkdtemp()
os.environ["HERMES_HOME"] = home
from tools.memory_tool import MemoryStore
ops = int(sys.argv[1])
store = MemoryStore(memory_char_limit=2200, user_char_limit=1375)
store.load_from_disk()
k = 0
while len("\\n§\\n".join(store.memory_entries)) < 0.85 * 2200:
    store.add("memory", "Seed fact %d: " % k + "x" * 80)
    k += 1
timings = {"add": [], "replace": [], "remove": []}
for i in range(ops):
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
print(json.dumps(timings))
"""


def measure_peer(python: str, ops: int) -> dict[str, Any]:
    out = subprocess.run(
        [python, "-c", PEER_DRIVER, str(ops)], capture_output=True, text=True, check=True
    )
    return summary(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--peer", metavar="PYTHON", help="a Python with hermes-agent installed")
    args = parser.parse_args()
    report: dict[str, Any] = {"ops_per_action": args.ops}
    report["rules_per_write"] = measure_rules(args.ops)
    report["tool"] = measure_tool(args.ops)
    report["service"] = measure_service(args.ops)
    if args.peer:
        report["peer"] = measure_peer(args.peer, args.ops)
    if args.json:
        print(json.dumps(report))
        return
    rules = report["rules_per_write"]
    print(f"{args.ops} ops per action on a store at {report['tool']['store_fill_percent']}%")
    print(f"rules stage per write: p50 {rules['p50_ms']:.3f} ms, p99 {rules['p99_ms']:.3f} ms")
    print("| writer | add ops/s | replace ops/s | remove ops/s | add p50 ms | add p99 ms |")
    print("|---|---|---|---|---|---|")
    for name in ("tool", "service", "peer"):
        if name in report:
            r = report[name]
            print(
                f"| {name} | {r['add']['ops_per_second']:,} | {r['replace']['ops_per_second']:,} "
                f"| {r['remove']['ops_per_second']:,} | {r['add']['p50_ms']:.3f} "
                f"| {r['add']['p99_ms']:.3f} |"
            )


if __name__ == "__main__":
    main()
