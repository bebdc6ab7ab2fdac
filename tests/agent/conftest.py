from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from hermes.agent.agent import Agent
from hermes.config import AgentConfig, MemoryConfig
from hermes.identity import owner_user_id
from hermes.llm.client import LLMClient
from hermes.llm.endpoint import Endpoint
from hermes.state.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI

T = TypeVar("T")


class Harness:
    """An Agent wired to real SQLite, real files and the fake LLM over HTTP."""

    def __init__(self, home: Path, fake: FakeOpenAI) -> None:
        self.home, self.fake = home, fake
        self.db = SessionDB.open(home)
        self.user = self.db.ensure_user(owner_user_id(home), role="owner").id
        self.agent_config = AgentConfig()
        self.memory_config = MemoryConfig(review_interval=0)
        self.timeout, self.max_retries = 5.0, 1

    def run(self, scenario: Callable[[Agent], Awaitable[T]]) -> T:
        async def go() -> T:
            client = LLMClient(
                Endpoint(
                    base_url=self.fake.base_url,
                    model="main-model",
                    api_key="sk-secret-key",
                    timeout=self.timeout,
                    max_retries=self.max_retries,
                )
            )
            agent = Agent(self.db, client, self.home, self.memory_config, self.agent_config)
            try:
                return await scenario(agent)
            finally:
                await agent.drain()
                await client.close()

        return asyncio.run(go())

    def system_prompts(self) -> list[str]:
        return [r["messages"][0]["content"] for r in self.fake.requests]


@pytest.fixture
def harness(home: Path, fake_llm: FakeOpenAI) -> Iterator[Harness]:
    h = Harness(home, fake_llm)
    yield h
    h.db.close()


def last_user_content(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
