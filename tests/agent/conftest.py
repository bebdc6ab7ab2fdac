from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gateway.app import build_app
from gateway.config import HermesConfig
from hermes.agent.agent import Agent
from hermes.config import AgentConfig, LLMConfig, MemoryConfig
from hermes.identity import owner_user_id
from hermes.state.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI

T = TypeVar("T")


class Harness:
    """The app's Agent, wired to real SQLite, real files and the fake LLM over HTTP."""

    def __init__(self, home: Path, fake: FakeOpenAI, database_url: str | None = None) -> None:
        self.home, self.fake = home, fake
        self.db = SessionDB.open(home, database_url)
        self.user = self.db.people.ensure_user(owner_user_id(home), role="owner").id
        self.agent_config = AgentConfig()
        self.memory_config = MemoryConfig(review_interval=0)
        self.timeout, self.max_retries = 5.0, 1

    def run(self, scenario: Callable[[Agent], Awaitable[T]]) -> T:
        """The agent of the app the composition root builds from this harness's config."""

        async def go() -> T:
            config = HermesConfig(
                llm=LLMConfig(
                    base_url=self.fake.base_url,
                    model="main-model",
                    api_key_env="TEST_LLM_KEY",
                    timeout=self.timeout,
                    max_retries=self.max_retries,
                ),
                memory=self.memory_config,
                agent=self.agent_config,
            )
            app = build_app(self.home, config, self.db, env={"TEST_LLM_KEY": "sk-secret-key"})
            try:
                return await scenario(app.agent)
            finally:
                await app.close()

        return asyncio.run(go())

    def system_prompts(self) -> list[str]:
        return [r["messages"][0]["content"] for r in self.fake.requests]


@pytest.fixture
def harness(home: Path, fake_llm: FakeOpenAI, database_url: str | None) -> Iterator[Harness]:
    """On both backends: a turn (messages, memory journal, search, reminders) on
    SQLite and on PostgreSQL."""
    h = Harness(home, fake_llm, database_url)
    yield h
    h.db.close()


def last_user_content(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
