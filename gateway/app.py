"""The composition root: the whole application graph, built from config in one place.

The gateway runtime, the CLI chat, scheduler jobs, benches and test helpers all call
`build_app`; nothing else constructs an Agent, a Router or the command table. The
order, and why:

1. models: the main one, and the auxiliary one for side tasks (search summaries,
   compression, review, consolidation) when it is a different endpoint;
2. memory: the memory service (the one write path: scan, provenance, provider mirror,
   threshold check) with the memory provider host beside it;
3. people: identity, access, roles, linking (merges go through memory), one cache
   (intake and commands share it);
4. the agent: sessions and turns over state.db, the tools, with the privacy setting
   for group chats, and the embeddings model when hybrid search is on (whoever runs the
   app starts its background task: `App.embedder.run`);
5. the command table (it acts on people, memory and the agent);
6. the router: intake, lanes and delivery over all of the above. Adapters are attached
   to it by whoever runs them (gateway runtime, CLI chat) before they start.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.config import (
    ConfigError,
    HermesConfig,
    SideTask,
    embeddings_endpoint,
    enabled_platforms,
    judge_wanted,
    main_endpoint,
    mcp_servers,
    provider_settings,
    secret,
    side_endpoint,
    transcription_endpoint,
)
from hermes import extras
from hermes.embedding_models import EndpointModel, LocalModel
from hermes.llm.client import LLMClient
from hermes.memory.scan_judge import Judge
from hermes.memory.service import MemoryService
from hermes.providers import registry
from hermes.providers.base import MemoryProvider
from hermes.providers.host import ProviderFactory, ProviderHost

logger = logging.getLogger(__name__)
# the people (most recently active first) whose memory provider client is made at start
WARM_PEOPLE = 10

if TYPE_CHECKING:  # steps 3 to 6 are imported by build_app itself: a CLI command that
    # needs only the memory service (`hermes memory add`) does not load them
    from gateway.admission.people import People
    from gateway.commands.context import RuntimeInfo
    from gateway.commands.table import Commands
    from gateway.pipeline.router import Router, RouterPolicy
    from hermes.agent.agent import Agent
    from hermes.embedder import Embedder
    from hermes.llm.metering import Meter
    from hermes.llm.types import ChatModel
    from hermes.state.db import SessionDB
    from hermes.tools.mcp import McpHub
    from hermes.tools.session_search import SummaryPolicy
    from hermes.tools.web import WebTools


@dataclass
class App:
    home: Path
    config: HermesConfig
    db: SessionDB
    people: People
    agent: Agent
    commands: Commands
    router: Router
    clients: list[LLMClient] = field(default_factory=list)  # ours to close
    embedder: Embedder | None = None  # hybrid search; None when search.embeddings is off
    _background: list[asyncio.Task[None]] = field(default_factory=list, repr=False)
    _stop: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def start_background(self) -> None:
        """Start the app's own background work (embedding new messages for hybrid
        search, delivering memory provider writes), in the running loop; `close` stops
        it."""
        if self._background:  # started already
            return
        if self.embedder is not None:
            self._background.append(asyncio.create_task(self.embedder.run(self._stop)))
            if isinstance(self.embedder.backend, LocalModel):  # loaded before a question
                self._background.append(asyncio.create_task(self.embedder.backend.warm()))
        # memory provider writes left waiting (a restart, an outage) are delivered now
        self._background.append(asyncio.create_task(self.agent.memory.providers.resume()))
        self._background.append(asyncio.create_task(self._ready_provider()))

    async def warm_models(self) -> None:
        """The model SDK's imports and clients made on a thread, before any chat can
        arrive (done inside a first turn, they held the event loop ~1 s; done beside
        one, the turn's own import waits for the thread's)."""
        distinct = {id(client): client for client in self.clients}.values()  # made once each
        await asyncio.gather(*(asyncio.to_thread(client.warm) for client in distinct))

    async def _ready_provider(self) -> None:
        """The memory provider's clients made for the people who talk most recently,
        off the event loop, before their next turn needs them (ProviderHost.warm)."""
        providers = self.agent.memory.providers
        if not await providers.aactive():
            return

        def warm() -> None:
            people = [p for p in self.db.people.users() if p.last_active is not None]
            people.sort(key=lambda p: p.last_active or 0, reverse=True)
            providers.warm(p.user.id for p in people[:WARM_PEOPLE])

        try:
            await asyncio.to_thread(warm)
        except Exception:  # a database error at start, say: each turn makes its own
            logger.exception("memory provider: could not be readied at start")

    async def health(self) -> str:
        """The main model endpoint's health, for /admin status."""
        return await self.clients[0].health() if self.clients else "in-process model"

    async def close(self) -> None:
        """Wait for background work (memory review, consolidation, the batch being
        embedded), then close clients."""
        self._stop.set()
        await self.agent.drain(timeout=30)
        await self.agent.memory.close()
        if self._background:
            _, late = await asyncio.wait(self._background, timeout=30)
            for task in late:
                task.cancel()
        for client in self.clients:
            await client.close()
        if self.embedder is not None:  # (a local model's thread; an endpoint's client again)
            await self.embedder.close()
        if self.agent.web is not None:
            await self.agent.web.close()
        if self.agent.mcp is not None:  # each server's connection, and a stdio one's process
            await self.agent.mcp.close()


def build_app(
    home: Path,
    config: HermesConfig,
    db: SessionDB,
    *,
    env: Mapping[str, str] | None = None,
    runtime: RuntimeInfo | None = None,
    model: ChatModel | None = None,
    policy: RouterPolicy | None = None,
    provider: ProviderFactory | None = None,
) -> App:
    """The application for `home`. `model` replaces the configured endpoint (benches
    and tests run an in-process model); without either, ConfigError says what to set.
    `policy` replaces the router settings derived from config (tests of other shapes)."""
    from gateway.admission.people import People
    from gateway.commands.table import Commands
    from gateway.pipeline.confirmations import Confirmations
    from gateway.pipeline.files_out import FileDesk
    from gateway.pipeline.media import MediaIntake
    from gateway.pipeline.router import Router
    from hermes.agent.agent import Agent
    from hermes.llm.reranker import LLMReranker
    from hermes.llm.summarizer import LLMSummarizer

    clients: list[LLMClient] = []
    search_model: LLMClient | None = None  # None with a given model: it does everything
    memory_model: LLMClient | None = None
    if model is None:  # 1
        endpoint = main_endpoint(config, env)
        if endpoint is None:
            raise ConfigError("no model is configured (llm.base_url, llm.model)")
        meter = usage_meter(db)
        main = LLMClient(endpoint, meter)
        clients.append(main)
        search_model = _side_client(config, SideTask.SESSION_SEARCH, env, clients, meter)
        memory_model = _side_client(config, SideTask.MEMORY, env, clients, meter)
        model = main
    if provider is None:  # the gateway needs it: a provider that cannot load stops it here
        provider = provider_factory(home, config, env)
    memory = build_memory(home, config, db, memory_model or model, provider=provider, env=env)
    memory.providers.probe()  # made now, and said in the log if it cannot answer
    people = People(config, db, memory)  # 3
    embedder = build_embedder(config, db, env)
    if embedder is not None and isinstance(embedder.backend, EndpointModel):
        clients.append(embedder.backend.client)  # warmed with the others
    agent = Agent(  # 4
        db,
        model,
        home,
        memory,
        config.agent,
        aux_model=memory_model,
        search_summarizer=LLMSummarizer(search_model) if search_model is not None else None,
        search_reranker=(
            LLMReranker(search_model)
            if config.search.rerank.enabled and search_model is not None
            else None
        ),
        search_policy=search_policy(config),
        group_memory=config.privacy.group_memory == "full",
        embedder=embedder,
        tools_table=dict(config.tools),  # its own: the dashboard changes it live
        web=web_tools(config, env),
        mcp=mcp_hub(config, env),
    )
    agent.vision = config.llm.vision
    commands = Commands(home, config, db, agent, people, runtime=runtime)  # 5
    transcriber = None
    if (speech := transcription_endpoint(config, env)) is not None:
        transcriber = LLMClient(speech)
        clients.append(transcriber)
    media = MediaIntake(home, config.media, config.transcription, agent, transcriber, db=db)
    router = Router(agent, db, people, commands, policy or router_policy(config), media=media)  # 6
    confirmations = Confirmations(  # what waits for a person's yes; `message`'s sending
        db,
        people,
        router.delivery,
        router.adapters,
        router.conversations,
        memory=memory,
        config=config.message,
        platforms=tuple(enabled_platforms(config)),
        scopes=router.intake.policy.scopes,
    )
    agent.courier = agent.asker = commands.confirmations = router.confirmations = confirmations
    agent.holders = people  # who may use which tools: from the people cache
    agent.filer = FileDesk(router.delivery, router.adapters, config.media.max_sent_file_kb * 1024)
    confirmations.go_on = router.handle
    return App(home, config, db, people, agent, commands, router, clients, embedder)


def web_tools(config: HermesConfig, env: Mapping[str, str] | None = None) -> WebTools | None:
    """The web tools, when the web extra is installed (who may use them: tools.web);
    PDFs are read as documents people send are (gateway/pipeline/pdf_text.py)."""
    if extras.missing("web"):
        return None
    from gateway.pipeline.pdf_text import pdf_text
    from hermes.tools.web import WebTools

    search = config.web.search
    return WebTools(
        config.web,
        api_key=secret(search.api_key_env, env) if search.api_key_env else None,
        read_pdf=functools.partial(
            pdf_text,
            max_pages=config.media.max_pdf_pages,
            max_chars=config.web.fetch.max_chars,
            seconds=config.media.document_seconds,
        ),
    )


def mcp_hub(config: HermesConfig, env: Mapping[str, str] | None = None) -> McpHub | None:
    """The owner's MCP servers (mcp.servers), when any is configured and the mcp extra
    is installed (else one warning naming the extra)."""
    if not config.mcp.servers:
        return None
    if (missing := extras.needs("mcp", "The MCP servers in config.yaml")) is not None:
        logger.warning("%s", missing)
        return None
    from hermes.tools.mcp import McpHub

    launches, problems = mcp_servers(config, env)
    for name, why in problems.items():
        logger.warning("MCP server %s cannot start: %s", name, why)
    return McpHub(launches, problems)


def search_policy(config: HermesConfig) -> SummaryPolicy:
    """The search side task's bounds (auxiliary.session_search, search.rerank)."""
    from hermes.tools.session_search import SummaryPolicy

    task, rerank = config.auxiliary.session_search, config.search.rerank
    return SummaryPolicy(
        concurrency=task.max_concurrency,
        timeout_s=task.timeout,
        rerank_candidates=rerank.candidates,
        rerank_timeout_s=rerank.timeout,
    )


def side_model(
    config: HermesConfig,
    task: SideTask,
    env: Mapping[str, str] | None = None,
    db: SessionDB | None = None,
) -> LLMClient | None:
    """A client for a side task's model (the caller closes it), None when no model is
    configured: what the CLI and the scheduler's jobs run consolidation with. With `db`,
    the tokens of calls made for a person are counted there (`usage_meter`)."""
    endpoint = side_endpoint(config, task, env)
    if endpoint is None:
        return None
    return LLMClient(endpoint, usage_meter(db) if db is not None else None)


def usage_meter(db: SessionDB) -> Meter:
    """What a client counts a person's side calls with (hermes/llm/metering.py): their
    tokens by day and model, beside their turns' (the Usage page, `hermes usage`),
    written on the database's executor."""

    from hermes.state.usage import Usage

    async def meter(user_id: str, prompt: int, completion: int, model: str) -> None:
        await db.run(db.usage.add, user_id, Usage(prompt, completion, model))

    return meter


def _side_client(
    config: HermesConfig,
    task: SideTask,
    env: Mapping[str, str] | None,
    clients: list[LLMClient],
    meter: Meter,
) -> LLMClient:
    """The side task's client, shared with any of `clients` (the main one first) that
    has the same endpoint; a new one is added to them."""
    endpoint = side_endpoint(config, task, env)
    for client in clients:
        if endpoint is None or client.endpoint == endpoint:
            return client
    assert endpoint is not None
    client = LLMClient(endpoint, meter)
    clients.append(client)
    return client


def build_embedder(
    config: HermesConfig, db: SessionDB, env: Mapping[str, str] | None = None
) -> Embedder | None:
    """The embeddings model of hybrid search, or None when `search.embeddings` is off
    (a local model that is not installed or not known: ConfigError saying so)."""
    from hermes.embedder import Embedder
    from hermes.embedding_models import local_problem

    emb = config.search.embeddings
    if emb.provider == "local":
        if (problem := local_problem(emb)) is not None:
            raise ConfigError(problem)
        return Embedder(LocalModel(emb), db, emb)
    endpoint = embeddings_endpoint(config, env)
    if endpoint is None:
        return None
    return Embedder(EndpointModel(LLMClient(endpoint), emb), db, emb)


def build_memory(
    home: Path,
    config: HermesConfig,
    db: SessionDB,
    model: ChatModel | None,
    *,
    provider: ProviderFactory | None = None,
    env: Mapping[str, str] | None = None,
) -> MemoryService:
    """The memory service: the one write path (also on its own, for the CLI's memory
    commands and the consolidation job). `model` consolidates (the auxiliary one) and,
    when `memory.scan.judge` asks for it, judges entries for the scan's second stage."""
    judge = None
    if model is not None and judge_wanted(config):
        judge = Judge(model, config.memory.scan.judge_timeout_seconds)
    section = config.memory
    if provider is None:
        provider = _on_first_use(home, config, env)
    host = ProviderHost(
        provider,
        home=home,
        recall_mode=section.recall_mode,
        prefetch_timeout=section.prefetch_timeout_ms / 1000,
        outbox=db.outbox,
    )
    return MemoryService(home, section, db, model=model, providers=host, judge=judge)


def _on_first_use(
    home: Path, config: HermesConfig, env: Mapping[str, str] | None
) -> ProviderFactory | None:
    """The configured provider's factory, found (its plugin imported) when the provider
    is first needed: a command that never touches it never runs plugin code."""
    if not config.memory.provider:
        return None
    found: list[ProviderFactory] = []

    def make() -> MemoryProvider:
        if not found:
            factory = provider_factory(home, config, env)
            assert factory is not None
            found.append(factory)
        return found[0]()

    return make


def provider_factory(
    home: Path, config: HermesConfig, env: Mapping[str, str] | None = None
) -> ProviderFactory | None:
    """The configured memory provider's factory (None: built-in only), its settings
    resolved (secrets from the environment variables config names); ConfigError when
    it cannot be found or loaded."""
    name = config.memory.provider
    if not name:
        return None
    try:
        fields = registry.config_schema(name, home)
        settings = provider_settings(fields, config.memory.providers.get(name, {}), env)
        return registry.load(name, settings, home)
    except registry.ProviderError as exc:
        raise ConfigError(str(exc)) from None


def router_policy(config: HermesConfig) -> RouterPolicy:
    """Intake and lane settings from the enabled platforms' sections."""
    from gateway.admission.intake import IntakePolicy
    from gateway.admission.session_key import Scope
    from gateway.pipeline.router import RouterPolicy

    enabled = list(enabled_platforms(config).items())
    always = frozenset(c for _, p in enabled for c in p.answer_without_mention)
    scopes = {name: Scope(p.group_scope) for name, p in enabled}
    intake = IntakePolicy(
        scopes=scopes,
        always_answer_chats=always,
        per_person_burst=config.gateway.per_person_burst,
        per_person_per_minute=config.gateway.per_person_per_minute,
    )
    streaming = {name: p.streaming for name, p in enabled if p.streaming is not None}
    return RouterPolicy(
        intake=intake,
        queue_mode=config.gateway.queue_mode,
        streaming=config.gateway.streaming,
        streaming_by_platform=streaming,
    )


__all__ = [
    "App",
    "build_app",
    "build_embedder",
    "build_memory",
    "provider_factory",
    "router_policy",
    "side_model",
]
