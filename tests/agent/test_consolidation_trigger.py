"""A write that crosses 80 % consolidates in the background; the next reply says so."""

from __future__ import annotations

import json
from typing import Any

from hermes.agent.agent import Agent, Surface
from hermes.memory import entries as fmt
from hermes.memory.consolidation import INSTRUCTIONS
from tests.agent.conftest import Harness
from tests.fakes.openai_server import Reply

CLI = Surface("cli")
SEED = [f"Garden bed {i} grows heirloom tomatoes and basil" for i in range(1, 8)]


def responder(request: dict[str, Any]) -> Reply:
    system = request["messages"][0]["content"]
    if system == INSTRUCTIONS:
        merged = {
            "text": "Garden beds 1, 2, 3, 4, 5, 6, 7, 8 grow heirloom tomatoes and basil",
            "sources": list(range(1, 9)),
        }
        return Reply(text=json.dumps({"entries": [merged], "dropped": []}))
    if request["messages"][-1]["role"] == "tool":
        return Reply(text="Saved.")
    last = request["messages"][-1]["content"]
    if last.startswith("remember"):
        return Reply.tool_call(
            "memory",
            {
                "action": "add",
                "target": "memory",
                "content": "Garden bed 8 grows heirloom tomatoes and basil",
            },
        )
    return Reply(text="Hello.")


def test_crossing_80_percent_consolidates_and_notifies(harness: Harness) -> None:
    harness.memory_config = harness.memory_config.model_copy(update={"memory_char_limit": 440})
    folder = harness.home / "memories" / harness.user
    folder.mkdir(parents=True)
    (folder / "MEMORY.md").write_text(fmt.serialize(SEED))  # 340 chars: 77 % of 440
    harness.fake.responder = responder

    async def scenario(agent: Agent) -> list[str]:
        conv = agent.sessions.open(harness.user, CLI, "k")
        first = await agent.turn(conv, "remember bed 8 too", CLI)
        await agent.drain()
        second = await agent.turn(conv, "hi", CLI)
        return [first.text, second.text]

    used = len(fmt.serialize(SEED))
    assert used <= 0.8 * 440 < used + 49  # the add crosses the line
    first, second = harness.run(scenario)
    assert first.startswith("Saved.") and second.startswith("Hello.")
    # one line, once, in the next reply after the consolidation finished
    assert (first + second).count("I tidied your memory: 8 → 1 entries") == 1
    assert fmt.parse((folder / "MEMORY.md").read_text()) == [
        "Garden beds 1, 2, 3, 4, 5, 6, 7, 8 grow heirloom tomatoes and basil"
    ]


def test_no_consolidation_below_the_threshold(harness: Harness) -> None:
    harness.fake.responder = responder

    async def scenario(agent: Agent) -> None:
        conv = agent.sessions.open(harness.user, CLI, "k")
        await agent.turn(conv, "remember bed 8", CLI)

    harness.run(scenario)
    assert not any(r["messages"][0]["content"] == INSTRUCTIONS for r in harness.fake.requests)
