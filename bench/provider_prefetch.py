"""What each memory provider adds to a turn before the model is called: its prefetch,
through the host, against the local fake of its service (tests/fakes/memory_services.py)
on 127.0.0.1, with its real client library.

    .venv/bin/python bench/provider_prefetch.py [--memories 200] [--turns 200] [--json]

For each provider: a person's namespace is filled with --memories memories (through the
provider's own writes: half remembered facts, half mirrored store entries), then
--turns recalls of varied questions are timed through `ProviderHost.recall` (the call
the agent awaits). The figure is our side plus the client library plus one local HTTP
round trip or more: a real service adds its own search time and the network to it.
The local providers (holographic, evidence) run on their own files, filled through the
mirror of the built-in stores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("MEM0_TELEMETRY", "False")  # before mem0ai is imported
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="bench-mem0-"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the fakes under tests/

from hermes.providers.base import MemoryProvider, MemoryWrite, ProviderSession
from hermes.providers.evidence import EvidenceProvider
from hermes.providers.holographic import HolographicProvider
from hermes.providers.host import ProviderHost
from hermes.state.db import SessionDB
from tests.providers.services import SERVICES, served

WORDS = (
    "garden hospital sister brother bicycle violin Lisbon Porto tea coffee project deadline "
    "recipe marathon guitar python database holiday train flight dentist birthday cat dog "
    "painting novel museum concert budget invoice meeting report kitchen balcony"
).split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(8)).capitalize() + "."


async def measure(
    make: Callable[[], MemoryProvider], home: Path, memories: int, turns: int, *, remember: bool
) -> dict[str, float]:
    rng = random.Random(7)
    db = SessionDB.open(home)
    host = ProviderHost(make, home=home, outbox=db.outbox, prefetch_timeout=10, call_timeout=30)
    person = ProviderSession("s_bench", "u_00000000000bench", "cli")
    host.session_started(person, parent_session_id=None, reason="new")
    for n in range(memories):
        text = f"{sentence(rng)} ({n})"
        if remember and n % 2:
            await host.call_tool(person.user_id, f"{host.name}_remember", {"content": text})
        else:
            host.memory_written(MemoryWrite("add", "user", text, None, person.user_id, "agent"))
    await host.drain(120)
    for _ in range(5):  # warm: connections, imports
        await host.recall(f"what about {rng.choice(WORDS)}?", person)
    times = []
    for _ in range(turns):
        question = f"what did I say about the {rng.choice(WORDS)} and {rng.choice(WORDS)}?"
        began = time.perf_counter()
        await host.recall(question, person)
        times.append((time.perf_counter() - began) * 1000)
    await host.shutdown(10)
    db.close()
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
        "mean_ms": round(statistics.fmean(times), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: dict[str, dict[str, Any]] = {}
    for name in sorted(SERVICES):
        running = served(name)
        service = next(running)
        with tempfile.TemporaryDirectory() as tmp:
            figures = asyncio.run(
                measure(service.factory, Path(tmp), args.memories, args.turns, remember=True)
            )
        rows[name] = {**figures, "kept": len(service.kept(service.space("u_00000000000bench")))}
        running.close()
    for name, local in (("holographic", HolographicProvider), ("evidence", EvidenceProvider)):
        with tempfile.TemporaryDirectory() as tmp:
            figures = asyncio.run(
                measure(local, Path(tmp), args.memories, args.turns, remember=False)
            )
            rows[name] = figures
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"prefetch through the host, {args.memories} memories, {args.turns} recalls")
    print(f"{'provider':<13} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8}")
    for name, row in rows.items():
        print(f"{name:<13} {row['p50_ms']:>8} {row['p95_ms']:>8} {row['mean_ms']:>8}")


if __name__ == "__main__":
    main()
