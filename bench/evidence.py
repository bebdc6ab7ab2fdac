"""The evidence provider at scale: index 10,000 files, re-index after 5 % change, and
time the prefetch.

    .venv/bin/python bench/evidence.py [--files 10000] [--kb 5] [--queries 300]

Synthetic Markdown notes (about 5 KB each: a service, its port, its owner, detail
lines from a 3,000-word vocabulary) in 100 folders, indexed through `index_paths` (the
code `hermes evidence index` runs) for one person. Then 5 % of the files are edited
(their mtime moves) and everything is indexed again: only those are read and
re-chunked. Reported: files/s and MB/s for both passes, the database size, and
p50/p95 of `EvidenceProvider.prefetch` (the recall before a model call).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from hermes.providers.evidence import EvidenceProvider, index_paths

USER = "u_00000000000000e1"


def write(folder: Path, count: int, kb: int, rng: random.Random) -> list[Path]:
    vocabulary = [
        f"{rng.choice('bcdfgklmnprstvz')}{rng.choice('aeiou')}{rng.choice('nrstlm')}{i}"
        for i in range(3000)
    ]
    paths = []
    for i in range(count):
        path = folder / f"team{i % 100}" / f"service-{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"# Service {i}", f"Listens on port {10000 + i}; owned by team {i % 100}."]
        while sum(len(line) + 1 for line in lines) < kb * 1024:
            lines.append(" ".join(rng.choices(vocabulary, k=12)))
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--kb", type=int, default=5)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as tmp:
        root, home = Path(tmp) / "docs", Path(tmp) / "home"
        paths = write(root, args.files, args.kb, rng)
        megabytes = sum(p.stat().st_size for p in paths) / 1e6
        provider = EvidenceProvider()
        provider.initialize(
            "bench", hermes_home=home, platform="cli", user_id=USER, agent_context="primary"
        )
        started = time.perf_counter()
        first = index_paths(provider.store, USER, [root])
        took = time.perf_counter() - started
        print(
            f"index {first.files:,} files ({megabytes:.1f} MB): {took:.1f} s, "
            f"{first.files / took:,.0f} files/s, {megabytes / took:.1f} MB/s, "
            f"{first.inserted:,} chunks"
        )
        changed = rng.sample(paths, len(paths) // 20)
        for path in changed:
            path.write_text(path.read_text().replace("Listens on", "Now listens on"))
        started = time.perf_counter()
        again = index_paths(provider.store, USER, [root])
        took = time.perf_counter() - started
        print(
            f"re-index after {len(changed):,} edits: {took:.1f} s; re-chunked "
            f"{again.indexed:,}, not read {again.unchanged:,}, chunks new "
            f"{again.inserted:,} / removed {again.deleted:,}"
        )
        size = sum(f.stat().st_size for f in home.glob("evidence.db*"))
        print(f"evidence.db: {size / 1e6:.1f} MB")
        timings = []

        async def ask() -> None:
            for _ in range(args.queries):
                i = rng.randrange(args.files)
                question = f"which port does service {i} listen on, team {i % 100}?"
                begun = time.perf_counter()
                await provider.prefetch(question, session_id="bench")
                timings.append((time.perf_counter() - begun) * 1000)

        asyncio.run(ask())
        cuts = statistics.quantiles(timings, n=20)
        print(f"prefetch p50 {statistics.median(timings):.1f} ms, p95 {cuts[18]:.1f} ms")


if __name__ == "__main__":
    main()
