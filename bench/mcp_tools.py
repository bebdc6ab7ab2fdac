"""An MCP server's start and a tool call's round trip, through the gateway's MCP hub,
against a real server built with the SDK (tests/fakes/mcp_server.py) over stdio.

    .venv/bin/python bench/mcp_tools.py [--starts 5] [--calls 200] [--json]

Start: from the first need to its tools listed (the process started, the handshake,
tools/list), each time a new process. Call: `find_note` on a running server, as the
agent calls it (the result bounded and fenced).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config import mcp_servers, parse_config
from hermes.tools.mcp import McpHub

ROOT = str(Path(__file__).resolve().parents[1])


def hub() -> McpHub:
    server = {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_server", "stdio"],
        "cwd": ROOT,
    }
    config = parse_config(json.dumps({"mcp": {"servers": {"notes": server}}}), "bench")
    launches, problems = mcp_servers(config, {"PATH": "/usr/bin:/bin"})
    return McpHub(launches, problems)


async def run(starts: int, calls: int) -> dict[str, float]:
    started = []
    for _ in range(starts):
        mcp = hub()
        begin = time.perf_counter()
        assert await mcp.tools("notes")
        started.append(time.perf_counter() - begin)
        await mcp.close()
    mcp = hub()
    await mcp.tools("notes")
    times = []
    try:
        for _ in range(calls):
            begin = time.perf_counter()
            assert (await mcp.call("notes", "find_note", {"query": "bike"}))["success"]
            times.append((time.perf_counter() - begin) * 1000)
    finally:
        await mcp.close()
    times.sort()
    return {
        "start_median_s": round(statistics.median(started), 2),
        "start_max_s": round(max(started), 2),
        "call_median_ms": round(statistics.median(times), 2),
        "call_p95_ms": round(times[int(len(times) * 0.95) - 1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(run(args.starts, args.calls))
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for name, value in figures.items():
        print(f"{name:<16} {value}")


if __name__ == "__main__":
    main()
