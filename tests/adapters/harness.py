"""Run a real adapter behind the real router and agent, with the fake LLM, for one test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from gateway.access import AccessControl
from gateway.config import HermesConfig
from gateway.platform_config import AccessConfig
from gateway.ports import PlatformAdapter
from gateway.router import Router, RouterPolicy
from hermes.agent.agent import Agent
from hermes.config import AgentConfig, MemoryConfig
from hermes.llm.client import LLMClient
from hermes.llm.endpoint import Endpoint
from hermes.state.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI

T = TypeVar("T")


def run_gateway(
    home: Path,
    fake_llm: FakeOpenAI,
    make_adapter: Callable[[], PlatformAdapter],
    body: Callable[[], Awaitable[T]],
    ready: Callable[[], None] | None = None,
) -> T:
    async def go() -> T:
        db = SessionDB.open(home)
        endpoint = Endpoint(base_url=fake_llm.base_url, model="m", max_retries=0, timeout=10)
        client = LLMClient(endpoint)
        agent = Agent(db, client, home, MemoryConfig(review_interval=0), AgentConfig())
        adapter = make_adapter()
        access = AccessControl(HermesConfig(access=AccessConfig(allow_all=True)), db)
        router = Router(agent, db, {adapter.name: adapter}, access, RouterPolicy())
        await adapter.start(router.handle)
        try:
            if ready is not None:
                await asyncio.to_thread(ready)
            return await body()
        finally:
            await adapter.stop()
            await router.stop()
            await client.close()
            db.close()

    return asyncio.run(go())
