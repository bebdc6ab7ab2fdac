"""Memory writes from several processes at once on one store: how long a write waits.

    .venv/bin/python bench/memory_contention.py [--processes 8] [--ops 150] [--json]

Each process runs `--ops` rounds of add + remove through MemoryTool.run on the same
user's MEMORY.md (scan, flock, re-read, atomic fsynced write); every operation's wall
time, lock wait included, is recorded. A fair lock shows in p99: a waiter polling
with sleeps can be overtaken again and again, one sleeping in the kernel is woken.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hermes.config import MemoryConfig
from hermes.identity import new_user_id
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory


def worker(home: str, user_id: str, index: int, ops: int, start_at: float) -> list[float]:
    tool = MemoryTool(UserMemory(Path(home), user_id, MemoryConfig()))
    while time.time() < start_at:  # every process starts writing at the same moment
        time.sleep(0.001)
    timings = []
    for i in range(ops):
        tag = f"[p{index}:{i}]"
        for args in (
            {"action": "add", "content": f"fact {tag}"},
            {"action": "remove", "old_text": tag},
        ):
            started = time.perf_counter()
            outcome = tool.run({"target": "memory", **args})
            timings.append((time.perf_counter() - started) * 1000)
            if not outcome.ok:
                raise SystemExit(f"process {index}: {outcome.result}")
    return timings


def measure(processes: int, ops: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        user_id = new_user_id()
        UserMemory(Path(home), user_id, MemoryConfig())
        start_at = time.time() + 1.0
        args = [(home, user_id, n, ops, start_at) for n in range(processes)]
        began = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            results = pool.starmap(worker, args)
        wall = time.perf_counter() - began - max(0.0, start_at - time.time())
    values = sorted(v for r in results for v in r)
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {
        "processes": processes,
        "operations": len(values),
        "ops_per_second": round(len(values) / wall),
        "p50_ms": round(q[49], 2),
        "p99_ms": round(q[98], 2),
        "max_ms": round(values[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--ops", type=int, default=150)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = measure(args.processes, args.ops)
    if args.json:
        print(json.dumps(report))
        return
    print(
        f"{report['processes']} processes, {report['operations']} writes on one store: "
        f"p50 {report['p50_ms']} ms, p99 {report['p99_ms']} ms, max {report['max_ms']} ms"
    )


if __name__ == "__main__":
    main()
