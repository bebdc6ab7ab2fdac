"""The agent's own overhead per turn, with a model that answers instantly.

    .venv/bin/python bench/turn_overhead.py [--turns 300] [--json] [--provider holographic
        [--facts 10000]]

Measures Agent.turn end to end minus nothing: prompt assembly, persistence of the user
and assistant messages (real SQLite in WAL mode), tool execution where the scripted
model calls a tool, for sessions already holding 10 and 1,000 messages. The model is an
in-process ChatModel that returns at once, so the figures are ours alone.

--provider NAME runs the text turns (10 messages of history) once built-in only and once
with that memory provider, its store first filled with --facts facts for the person
(synthetic: names, places and a 2,000-word vocabulary), and prints the overhead per
turn: the prefetch before the model call (the syncs run after the reply).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gateway.app import build_app
from gateway.config import HermesConfig
from hermes.agent.agent import Surface
from hermes.agent.conversation import to_new_message
from hermes.identity import new_user_id
from hermes.llm.types import ModelReply, ToolCall
from hermes.memory.scan_judge import JUDGE_MARKER
from hermes.state.db import SessionDB

CLI = Surface("cli")


class InstantModel:
    """Answers at once; every `tool_every`-th turn first calls the memory tool; as the
    memory guard's judge (on by default) it allows every note at once."""

    def __init__(self, tool_every: int) -> None:
        self.tool_every, self.turn = tool_every, 0

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        tokens = 30 * len(messages)
        if str(messages[0].get("content", "")).startswith(JUDGE_MARKER):
            verdict = '{"verdict": "allow", "category": "none"}'
            return ModelReply(verdict, prompt_tokens=tokens, completion_tokens=15)
        if messages[-1]["role"] == "user":
            self.turn += 1
            if self.tool_every and self.turn % self.tool_every == 0:
                args = {"action": "add", "target": "memory", "content": f"fact {self.turn}"}
                call = ToolCall(f"c{self.turn}", "memory", json.dumps(args))
                return ModelReply(None, (call,), prompt_tokens=tokens, completion_tokens=5)
        return ModelReply("Sure, here you go.", prompt_tokens=tokens, completion_tokens=5)


async def measure(  # noqa: PLR0917 - a bench's knobs
    home: Path, history: int, turns: int, tool_every: int, provider: str = "", facts: int = 0
) -> list[float]:
    db = SessionDB.open(home)
    user = db.people.ensure_user(new_user_id()).id
    config = HermesConfig.model_validate(
        {
            "memory": {"review_interval": 0, "provider": provider},
            "agent": {"context_budget_tokens": 2_000_000},
        }
    )
    if provider:
        await fill(home, user, facts, provider)
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


NAMES = "Mina Leo Sara Acme Berlin Tokyo Postgres Kubernetes Grafana Lisbon".split()


async def fill(home: Path, user: str, count: int, provider: str) -> None:
    """`count` facts for the person in the provider's own store, the way they get there:
    holographic through its tool; evidence as notes indexed, each with a verified fact
    citing its chunk."""
    import random

    rng = random.Random(3)
    vocabulary = [
        f"{rng.choice('bcdfgklmnprst')}{rng.choice('aeiou')}" * 2 + str(i % 7) for i in range(2000)
    ]
    texts = [
        f"{rng.choice(NAMES)} {' '.join(rng.choices(vocabulary, k=7))} note {i}"
        for i in range(count)
    ]
    if provider == "holographic":
        from hermes.providers.holographic import HolographicProvider

        store = HolographicProvider()
        store.initialize(
            "fill", hermes_home=home, platform="cli", user_id=user, agent_context="primary"
        )
        for text in texts:
            await store.handle_tool_call("fact_store", {"action": "add", "content": text})
        return
    from hermes.state.evidence import EvidenceStore

    evidence = EvidenceStore.at(home)
    for i, text in enumerate(texts):
        evidence.index(
            user, "note", f"note-{i}", [(text, 1, 1)], content_hash=str(i), size=len(text)
        )
        [chunk] = evidence.search_chunks(user, [f"{i}"], 1) or [None]
        if chunk is not None:
            evidence.add_fact(user, text, [chunk.id], status="verified")


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
    parser.add_argument("--provider", default="", help="also measure with this memory provider")
    parser.add_argument("--facts", type=int, default=10_000)
    args = parser.parse_args()
    report: dict[str, Any] = {}
    if args.provider:
        for label, name in (("built_in_only", ""), (args.provider, args.provider)):
            with tempfile.TemporaryDirectory() as tmp:
                timings = asyncio.run(measure(Path(tmp), 10, args.turns, 0, name, args.facts))
            report[f"history_10_text_{label}"] = summary(timings)
        base, withp = (
            report["history_10_text_built_in_only"],
            report[f"history_10_text_{args.provider}"],
        )
        report["prefetch_overhead_p50_ms"] = round(withp["p50_ms"] - base["p50_ms"], 2)
        print(json.dumps(report, indent=1))
        return
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
