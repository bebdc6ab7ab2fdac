"""Building the agent from config: one place for the CLI chat and the gateway process."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gateway.config import HermesConfig, auxiliary_endpoint
from hermes.agent.agent import Agent
from hermes.llm.client import LLMClient
from hermes.llm.endpoint import Endpoint
from hermes.llm.summarizer import LLMSummarizer
from hermes.state.db import SessionDB
from hermes.tools.session_search import SummaryPolicy


@dataclass
class Assembled:
    agent: Agent
    clients: list[LLMClient]

    async def close(self) -> None:
        await self.agent.drain(timeout=30)
        for client in self.clients:
            await client.close()


def build_agent(home: Path, config: HermesConfig, db: SessionDB, endpoint: Endpoint) -> Assembled:
    main = LLMClient(endpoint)
    clients = [main]
    aux_endpoint = auxiliary_endpoint(config, config.auxiliary.session_search)
    aux = LLMClient(aux_endpoint) if aux_endpoint and aux_endpoint != endpoint else main
    if aux is not main:
        clients.append(aux)
    task = config.auxiliary.session_search
    agent = Agent(
        db,
        main,
        home,
        config.memory,
        config.agent,
        aux_model=aux,
        search_summarizer=LLMSummarizer(aux),
        search_policy=SummaryPolicy(concurrency=task.max_concurrency, timeout_s=task.timeout),
        group_memory=config.privacy.group_memory == "full",
    )
    return Assembled(agent, clients)
