"""One scheduler sweep over many users whose stores are at 85 %, with an instant model.

    .venv/bin/python bench/consolidation.py [--users 1000] [--json]

Every user's MEMORY.md is filled to ~85 % of 2,200 chars; the consolidation check then
runs exactly as the scheduler job does (scan every store, lock, ask the model, validate
the proposal, compare-and-swap write, record versions and events in state.db). The model
is in-process and answers at once with a faithful proposal (each project's two entries
merged into one that keeps every word and number), so the time measured is ours alone,
the validator's meaning checks included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.app import build_memory
from gateway.config import HermesConfig
from hermes.identity import new_user_id
from hermes.llm.types import ModelReply
from hermes.memory import entries as fmt
from hermes.state.db import SessionDB

LINE = re.compile(r"^(\d+)\. (?:\[protected\] )?(.*)$")
WORDS = ["alpha", "beta", "gamma", "delta", "kappa", "sigma", "omega", "lambda"]


class InstantConsolidator:
    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        lines = []
        for line in str(messages[-1]["content"]).splitlines():
            match = LINE.match(line)
            if match:
                lines.append((int(match.group(1)), match.group(2)))
        entries = []
        for (i, service), (j, database) in zip(lines[::2], lines[1::2], strict=False):
            rest = database.split(" uses ", 1)[1]  # "database ... on cluster ..."
            entries.append({"text": f"{service} with {rest}", "sources": [i, j]})
        if len(lines) % 2:
            entries.append({"text": lines[-1][1], "sources": [lines[-1][0]]})
        return ModelReply(json.dumps({"entries": entries, "dropped": []}))


def fill(home: Path, users: int) -> None:
    for u in range(users):
        folder = home / "memories" / new_user_id()
        folder.mkdir(parents=True)
        entries, k = [], 0
        while fmt.usage(entries) < 0.85 * 2200 - 90:
            w = WORDS[k % len(WORDS)]
            entries.append(f"Project {k} of team {u} runs service {w}")
            entries.append(f"Project {k} of team {u} uses database {w}store on cluster {w}{k}")
            k += 1
        (folder / "MEMORY.md").write_text(fmt.serialize(entries))


async def sweep_once(home: Path) -> tuple[float, dict[str, int]]:
    db = SessionDB.open(home)
    started = time.perf_counter()
    memory = build_memory(home, HermesConfig(), db, InstantConsolidator())
    runs = await memory.check()
    seconds = time.perf_counter() - started
    db.close()
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.outcome.status] = counts.get(run.outcome.status, 0) + 1
    return seconds, counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # a rejection is reported in the outcomes, not logged
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        fill(home, args.users)
        seconds, counts = asyncio.run(sweep_once(home))
        idle_seconds, _ = asyncio.run(sweep_once(home))  # nothing over the threshold now
    report = {
        "users": args.users,
        "sweep_seconds": round(seconds, 2),
        "per_store_ms": round(seconds * 1000 / args.users, 2),
        "outcomes": counts,
        "idle_sweep_seconds": round(idle_seconds, 3),
    }
    if args.json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        print(f"{key:20} {value}")


if __name__ == "__main__":
    main()
