"""Memory tool throughput and latency on a near-full store.

    .venv/bin/python bench/memory_ops.py [--ops 2000] [--json]

Each timed operation goes through MemoryTool.run: scan, lock, re-read, decide, temp
file, fsync, os.replace, fsync of the folder. The store is kept at about 90 % of the
2,200-char limit; every add is paired with a remove so the fill level stays put.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hermes.config import MemoryConfig
from hermes.identity import new_user_id
from hermes.memory import entries as fmt
from hermes.memory.store import Target
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory


def near_full_store(home: Path) -> tuple[MemoryTool, UserMemory]:
    memory = UserMemory(home, new_user_id(), MemoryConfig())
    tool = MemoryTool(memory)
    k = 0
    while fmt.usage(memory.store(Target.MEMORY).read().entries) < 0.85 * 2200:
        tool.run({"action": "add", "target": "memory", "content": f"Seed fact {k}: " + "x" * 80})
        k += 1
    return tool, memory


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else 0


def measure(ops: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        tool, memory = near_full_store(Path(tmp))
        timings: dict[str, list[float]] = {"add": [], "replace": [], "remove": []}
        for i in range(ops):
            tag = f"bench-{i}"
            for action, args in (
                ("add", {"content": f"Bench fact {tag}: prefers x"}),
                ("replace", {"old_text": tag, "content": f"Bench fact {tag}: prefers y"}),
                ("remove", {"old_text": tag}),
            ):
                started = time.perf_counter()
                outcome = tool.run({"action": action, "target": "memory", **args})
                timings[action].append((time.perf_counter() - started) * 1000)
                assert outcome.ok, outcome.result
        fill = memory.store(Target.MEMORY).read().percent
    report: dict[str, Any] = {"ops_per_action": ops, "store_fill_percent": fill}
    for action, values in timings.items():
        report[action] = {
            "ops_per_second": round(1000 / statistics.fmean(values)),
            "p50_ms": round(percentile(values, 50), 3),
            "p99_ms": round(percentile(values, 99), 3),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = measure(args.ops)
    if args.json:
        print(json.dumps(report))
        return
    print(f"store at {report['store_fill_percent']}% of 2,200 chars, {args.ops} ops per action")
    for action in ("add", "replace", "remove"):
        r = report[action]
        print(
            f"{action:8} {r['ops_per_second']:>7,} ops/s   "
            f"p50 {r['p50_ms']:.3f} ms   p99 {r['p99_ms']:.3f} ms"
        )


if __name__ == "__main__":
    main()
