"""The local embeddings models (`search.embeddings.provider: local`): what each costs.

    .venv/bin/python bench/local_embeddings.py [--threads 1] [--json]

Each model in a fresh process (its extra installed: `make install` has both), through
the gateway's own `LocalModel` on its own thread, as the gateway runs it: the first
embedding (the model loaded), then 256 messages in batches of 64 (what the background
task sends), then 20 questions one at a time (the reply path), each a wall time on an
otherwise idle machine; and the process's peak RSS before and after, the model's memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes.config import EmbeddingsConfig
from hermes.embedding_models import LOCAL, LocalModel

MESSAGE = (
    "Ich habe mein Fahrrad gestern am Hauptbahnhof abgestellt, Nummer {}, und dann bin ich "
    "nach Hause gegangen."
)
QUESTION = "¿dónde dejé mi bicicleta?"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(name: str, threads: int) -> dict[str, object]:
    model = LocalModel(EmbeddingsConfig(provider="local", model=name, threads=threads))
    before = peak_mb()
    try:
        started = time.perf_counter()
        await model.embed(["hello"], query=False)
        load = time.perf_counter() - started
        texts = [MESSAGE.format(i) for i in range(64)]
        started = time.perf_counter()
        for _ in range(4):
            await model.embed(texts, query=False)
        per_message = (time.perf_counter() - started) / 256
        started = time.perf_counter()
        for _ in range(20):
            vector = await model.embed([QUESTION], query=True)
        per_question = (time.perf_counter() - started) / 20
    finally:
        await model.close()
    return {
        "model": name,
        "name": model.name,
        "dimensions": len(vector[0]),
        "threads": threads,
        "first_embedding_s": round(load, 2),
        "ms_per_message_batched": round(per_message * 1000, 2),
        "ms_per_question": round(per_question * 1000, 2),
        "rss_before_mb": round(before),
        "rss_added_mb": round(peak_mb() - before),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's model
    args = parser.parse_args()
    if args.one:
        print(json.dumps(asyncio.run(measure(args.one, args.threads))))
        return
    rows = []
    for name in LOCAL:
        out = subprocess.run(
            [sys.executable, __file__, "--one", name, "--threads", str(args.threads)],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(out.stdout))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        "| model | dimensions | first embedding (load) | ms a message (batches of 64) "
        "| ms a question | memory added |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| `{r['model']}` | {r['dimensions']} | {r['first_embedding_s']} s "
            f"| {r['ms_per_message_batched']} | {r['ms_per_question']} "
            f"| {r['rss_added_mb']} MB |"
        )


if __name__ == "__main__":
    main()
