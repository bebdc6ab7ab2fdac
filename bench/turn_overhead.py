"""The agent's own overhead per turn, with a model that answers instantly.

    .venv/bin/python bench/turn_overhead.py [--turns 300] [--json]

Measures Agent.turn end to end minus nothing: prompt assembly, persistence of the user
and assistant messages (real SQLite in WAL mode), tool execution where the scripted
model calls a tool, for sessions already holding 10 and 1,000 messages. The model is an
in-process ChatModel that returns at once, so the figures are ours alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.app import build_app
from gateway.config import HermesConfig
from hermes.agent.agent import Surface
from hermes.agent.conversation import to_new_message
from hermes.identity import new_user_id
from hermes.llm.types import ModelReply, ToolCall
from hermes.state.db import SessionDB

CLI = Surface("cli")


class InstantModel:
    """Answers at once; every `tool_every`-th turn first calls the memory tool."""

    def __init__(self, tool_every: int) -> None:
        self.tool_every, self.turn = tool_every, 0

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        temperature: float | None = None,
    ) -> ModelReply:
        tokens = 30 * len(messages)
        if messages[-1]["role"] == "user":
            self.turn += 1
            if self.tool_every and self.turn % self.tool_every == 0:
                args = {"action": "add", "target": "memory", "content": f"fact {self.turn}"}
                call = ToolCall(f"c{self.turn}", "memory", json.dumps(args))
                return ModelReply(None, (call,), prompt_tokens=tokens, completion_tokens=5)
        return ModelReply("Sure, here you go.", prompt_tokens=tokens, completion_tokens=5)


async def measure(home: Path, history: int, turns: int, tool_every: int) -> list[float]:
    db = SessionDB.open(home)
    user = db.people.ensure_user(new_user_id()).id
    config = HermesConfig.model_validate(
        {"memory": {"review_interval": 0}, "agent": {"context_budget_tokens": 2_000_000}}
    )
    app = build_app(home, config, db, model=InstantModel(tool_every))
    agent = app.agent
    conv = agent.sessions.open(user, CLI, f"bench:{history}")
    filler = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"earlier message {i} " * 8}
        for i in range(history)
    ]
    db.conversations.add_messages(conv.id, [to_new_message(m) for m in filler])
    conv.append(filler)
    timings = []
    for i in range(turns):
        started = time.perf_counter()
        result = await agent.turn(conv, f"question number {i} about the project", CLI)
        timings.append((time.perf_counter() - started) * 1000)
        assert result.ok
        if i % 40 == 39:  # keep the store from filling up
            agent.memory_of(user).folder.joinpath("MEMORY.md").unlink(missing_ok=True)
    await app.close()
    db.close()
    return timings


def summary(timings: list[float]) -> dict[str, float]:
    cuts = statistics.quantiles(timings, n=100, method="inclusive")
    return {
        "turns_per_second": round(1000 / statistics.fmean(timings)),
        "p50_ms": round(cuts[49], 2),
        "p99_ms": round(cuts[98], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    for history in (10, 1000):
        for label, tool_every in (("text", 0), ("with_tool_every_4th", 4)):
            with tempfile.TemporaryDirectory() as tmp:
                timings = asyncio.run(measure(Path(tmp), history, args.turns, tool_every))
            report[f"history_{history}_{label}"] = summary(timings)
    if args.json:
        print(json.dumps(report))
        return
    for key, figures in report.items():
        print(
            f"{key:34} {figures['turns_per_second']:>6,} turns/s   "
            f"p50 {figures['p50_ms']:.2f} ms   p99 {figures['p99_ms']:.2f} ms"
        )


if __name__ == "__main__":
    main()
