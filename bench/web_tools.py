"""The web tools' own overhead per call, against a local site (tests/fakes/web_site.py).

    .venv/bin/python bench/web_tools.py [--calls 200] [--json]

For each kind of call, the median and p95 of `WebTools.run_fetch` / `run_search` as the
agent calls it (the address check on the resolver, the bounded read, the extraction,
the fence) beside a bare aiohttp GET of the same URL on a kept-alive connection (what
any fetch costs here): the difference is the tool's own work. The site answers at once
from this machine, so network time is nil; a real page adds its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes.config import WebConfig
from hermes.tools.web import WebTools
from tests.fakes.web_site import WebSite

USER = "u_00000000000000a1"


async def timed(calls: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    await call()  # warm: the connection, the extractor's imports
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1], 2),
    }


async def run(calls: int) -> dict[str, dict[str, float]]:
    site = WebSite().start()
    config = WebConfig.model_validate(
        {
            "allow_networks": ["loopback"],
            "per_person_per_minute": 10_000,
            "per_person_burst": 1000,
            "search": {"backend": "searxng", "url": site.root},
        }
    )
    web = WebTools(config)
    figures: dict[str, dict[str, float]] = {}
    try:
        async with aiohttp.ClientSession() as bare:

            async def get(path: str) -> None:
                async with bare.get(f"{site.root}{path}") as response:
                    await response.read()

            for name, path in (("article (HTML)", "/article"), ("text", "/notes.txt")):
                raw = await timed(calls, lambda p=path: get(p))  # type: ignore[misc]
                tool = await timed(
                    calls,
                    lambda p=path: web.run_fetch(USER, {"url": f"{site.root}{p}"}),  # type: ignore[misc]
                )
                figures[f"web_fetch {name}"] = summary(tool)
                figures[f"bare GET {name}"] = summary(raw)
            search = await timed(calls, lambda: web.run_search(USER, {"query": "night trains"}))
            raw_search = await timed(calls, lambda: get("/search?q=night+trains&format=json"))
            figures["web_search (searxng)"] = summary(search)
            figures["bare GET (searxng)"] = summary(raw_search)
    finally:
        await web.close()
        site.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(run(args.calls))
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{'call':<28} {'median ms':>10} {'p95 ms':>8}")
    for name, numbers in figures.items():
        print(f"{name:<28} {numbers['median_ms']:>10} {numbers['p95_ms']:>8}")


if __name__ == "__main__":
    main()
