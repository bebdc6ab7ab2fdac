"""Config sections the agent itself reads. The root model and loader live in gateway.config."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

MCP_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}", re.ASCII)  # an MCP server's name


def _yaml_switch(value: Any) -> Any:
    """YAML 1.1 reads a bare on/off (yes/no) as true/false: a hand-written `judge: off`,
    or one a config edit wrote back without its quotes, means what it says."""
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


# a setting written on | off (or auto | on | off)
OnOff = Annotated[Literal["on", "off"], BeforeValidator(_yaml_switch)]
AutoOnOff = Annotated[Literal["auto", "on", "off"], BeforeValidator(_yaml_switch)]


class Section(BaseModel):
    """Base for every config section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ConsolidationConfig(Section):
    threshold: float = Field(default=0.80, gt=0.1, le=1.0)  # consolidate above this fill
    target: float = Field(default=0.60, gt=0.05, lt=1.0)  # aim for this fill afterwards
    max_drop_fraction: float = Field(default=0.25, ge=0.0, le=1.0)
    notify: OnOff = "on"
    check_interval_minutes: float = Field(default=10.0, gt=0, le=24 * 60)


class ScanConfig(Section):
    """The memory guard's second stage: a model judges every write that passes the rules
    (the auxiliary model when configured, else the chat model). on (default; "auto" is
    the same) or off (the rules alone decide: not recommended)."""

    judge: AutoOnOff = "on"
    judge_timeout_seconds: float = Field(default=15.0, gt=0, le=300)


class MemoryConfig(Section):
    """The built-in MEMORY.md / USER.md stores."""

    memory_enabled: bool = True
    user_profile_enabled: bool = True
    # where the stores are: MEMORY.md/USER.md files in the home, or rows of the database
    # holding the same text; unset (None): the database with a PostgreSQL database.url,
    # else the files
    backend: Literal["files", "database"] | None = None
    memory_char_limit: int = Field(default=2200, ge=100, le=100_000)
    user_char_limit: int = Field(default=1375, ge=100, le=100_000)
    review_interval: int = Field(default=10, ge=0, le=1000)  # user turns; 0 disables
    consolidation: ConsolidationConfig = ConsolidationConfig()
    scan: ScanConfig = ScanConfig()
    # one external memory provider beside the built-in stores ('' = built-in only); its
    # settings under providers.<name> (secrets by env var name, never the value)
    provider: str = ""
    recall_mode: Literal["context", "tools", "hybrid"] = "hybrid"
    prefetch_timeout_ms: int = Field(default=800, ge=10, le=60_000)
    providers: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @field_validator("provider", mode="before")
    @classmethod
    def _one_provider(cls, value: Any) -> Any:
        if isinstance(value, list):
            if len(value) > 1:
                raise ValueError(
                    f"one external memory provider at most, got {len(value)} "
                    f"({', '.join(map(str, value))}): keep one, or '' for built-in only"
                )
            return value[0] if value else ""
        return "" if value is None else value


class SessionsConfig(Section):
    idle_minutes: float = Field(default=360.0, gt=0)
    retention_days: int | None = Field(default=None, ge=1)  # prune older sessions; off


class AgentConfig(Section):
    max_tool_iterations: int = Field(default=12, ge=1, le=100)
    context_budget_tokens: int = Field(default=24_000, ge=1_000, le=2_000_000)
    keep_recent_messages: int = Field(default=8, ge=2, le=200)  # kept verbatim on compression


class ModelPrice(Section):
    """What a model costs per million tokens: those sent (`input`) and written (`output`)."""

    input: float = Field(ge=0, le=100_000)
    output: float = Field(ge=0, le=100_000)


class LLMConfig(Section):
    """The main model: any OpenAI-compatible endpoint (OpenAI, OpenRouter, Ollama, vLLM)."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None  # name of the env var holding the key; none for local
    timeout: float = Field(default=60.0, gt=0, le=3600)  # per request (connect, each read)
    # one model call from start to finish, retries and streaming included
    deadline: float = Field(default=300.0, gt=0, le=7200)
    max_retries: int = Field(default=3, ge=0, le=10)
    temperature: float = Field(default=0.7, ge=0, le=2)
    # photos as image parts: on | off | auto (tried, and given up for the process when
    # the endpoint refuses image parts)
    vision: AutoOnOff = "auto"
    # each model's price (by the name in `model`), for the dashboard's Usage page: a model
    # not named here is counted in tokens only
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    currency: str = Field(default="USD", min_length=1, max_length=8)


class TranscriptionConfig(Section):
    """Voice notes and audio through an OpenAI-compatible /v1/audio/transcriptions (OpenAI,
    Groq, a local whisper server); every unset endpoint key falls back to `llm`."""

    model: str = "whisper-1"
    base_url: str | None = None
    api_key_env: str | None = None
    enabled: bool = True
    timeout: float = Field(default=120.0, gt=0, le=3600)
    max_seconds: int = Field(default=600, ge=1, le=4 * 3600)  # longer recordings are refused
    max_mb: float = Field(default=20.0, gt=0, le=200)


class MediaConfig(Section):
    """Photos, voice notes and files people send, and files the assistant sends."""

    max_download_mb: float = Field(default=20.0, gt=0, le=200)  # checked before downloading
    max_image_side: int = Field(default=1568, ge=128, le=8192)  # downscaled to fit
    max_image_kb: int = Field(default=1500, ge=50, le=20_000)  # the data URL's image
    max_document_kb: int = Field(default=2048, ge=1, le=100_000)
    max_document_chars: int = Field(default=40_000, ge=100, le=1_000_000)  # added to the turn
    # bounds on the work one message can cause (a small file can be a decompression bomb)
    max_image_megapixels: float = Field(default=24.0, ge=1, le=80)  # decoded, after draft
    max_images_per_message: int = Field(default=4, ge=1, le=20)  # the rest get a note
    max_pdf_pages: int = Field(default=100, ge=1, le=5000)  # pages read, then it stops
    document_seconds: float = Field(default=20.0, gt=0, le=600)  # one document's reading
    # a file the assistant writes and sends (send_file), below the platform's own limit
    max_sent_file_kb: int = Field(default=1024, ge=1, le=51_200)


class AuxiliaryTaskConfig(Section):
    model: str | None = None  # default: auxiliary.model, then llm.model
    timeout: float = Field(default=20.0, gt=0, le=600)


class SearchSummaryConfig(AuxiliaryTaskConfig):
    max_concurrency: int = Field(default=3, ge=1, le=32)


class AuxiliaryConfig(Section):
    """A cheaper model for side tasks; every unset key falls back to the `llm` section."""

    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    temperature: float = Field(default=0.2, ge=0, le=2)
    session_search: SearchSummaryConfig = SearchSummaryConfig()  # summaries of search hits
    # consolidation, the memory guard's judge, compression summaries, the session review
    memory: AuxiliaryTaskConfig = AuxiliaryTaskConfig()


class EmbeddingsConfig(Section):
    """Hybrid retrieval: message vectors fused with the lexical ranking, from any
    OpenAI-compatible /v1/embeddings endpoint (`provider: endpoint`, off while `model` is
    unset; every unset endpoint key falls back to the `llm` section) or from a model
    running in the gateway's process (`provider: local`: `model` names it, USE by
    default; hermes/embedding_models.py `LOCAL`). A question and a stored message are
    marked as each model was trained to read them (its known prefixes or input types,
    `KNOWN` there); the `query_*`/`document_*` keys say it for a model not known."""

    provider: Literal["endpoint", "local"] = "endpoint"
    model: str | None = None  # e.g. text-embedding-3-small, nomic-embed-text; local: e5-small
    base_url: str | None = None
    api_key_env: str | None = None
    dimensions: int | None = Field(default=None, ge=8, le=8192)  # for models that take it
    query_prefix: str | None = Field(default=None, max_length=200)  # e.g. "query: "
    document_prefix: str | None = Field(default=None, max_length=200)  # e.g. "passage: "
    query_input_type: str | None = Field(default=None, max_length=60)  # e.g. query
    document_input_type: str | None = Field(default=None, max_length=60)  # e.g. document
    threads: int = Field(default=1, ge=1, le=64)  # the local model's CPU threads
    batch_size: int = Field(default=64, ge=1, le=2048)  # texts per request (background)
    timeout: float = Field(default=30.0, gt=0, le=600)  # one background request
    query_timeout: float = Field(default=3.0, gt=0, le=60)  # the question, on the reply path
    cache_mb: int = Field(default=256, ge=1, le=65_536)  # per-user vectors kept in memory


class RerankConfig(Section):
    """The best candidates of a search put in order by the search side task's model
    (`auxiliary.session_search`): hermes/llm/reranker.py. One model call per search."""

    enabled: bool = False
    candidates: int = Field(default=20, ge=2, le=50)  # messages shown to the model
    timeout: float = Field(default=10.0, gt=0, le=120)  # past it, the fused order stands


class SearchConfig(Section):
    embeddings: EmbeddingsConfig = EmbeddingsConfig()
    rerank: RerankConfig = RerankConfig()


class WebSearchConfig(Section):
    """`web_search`'s backend: ddgs (no key; several public engines), a self-hosted
    SearXNG (its JSON API at `url`), or Brave's Search API (key in `api_key_env`)."""

    backend: Literal["ddgs", "searxng", "brave"] = "ddgs"
    url: str | None = None  # searxng: https://search.example.org
    api_key_env: str | None = None  # brave: the NAME of the variable holding the key
    proxy: str | None = None  # ddgs: its requests through this proxy (http://, socks5://)
    ca_file: str | None = None  # ddgs: a CA bundle to trust (a TLS-inspecting proxy)
    max_results: int = Field(default=5, ge=1, le=20)
    timeout: float = Field(default=15.0, gt=0, le=120)


class WebFetchConfig(Section):
    """`web_fetch`'s bounds: the whole fetch (redirects included) in `timeout`, at most
    `max_bytes` of body after decompression, `max_chars` of text to the model."""

    timeout: float = Field(default=20.0, gt=0, le=300)
    max_bytes: int = Field(default=5_000_000, ge=10_000, le=100_000_000)
    max_redirects: int = Field(default=5, ge=0, le=20)
    max_chars: int = Field(default=12_000, ge=500, le=200_000)


class WebConfig(Section):
    """The web tools (`web_search`, `web_fetch`; who may use them: `tools.web`)."""

    search: WebSearchConfig = WebSearchConfig()
    fetch: WebFetchConfig = WebFetchConfig()
    # networks a fetch may reach although they are not public: CIDRs, or "loopback",
    # "private", "link-local" (cloud metadata lives there: think twice)
    allow_networks: list[str] = Field(default_factory=list)

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        from hermes.tools.addresses import parse_networks  # noqa: PLC0415 - no cycle at import

        parse_networks(value)  # ValueError names the entry
        return value

    per_person_per_minute: float = Field(default=10.0, gt=0, le=10_000)  # searches + fetches
    per_person_burst: int = Field(default=5, ge=1, le=1_000)


TARGET = re.compile(r"([a-z]{2,20}):(user|chat):(\S{1,200})", re.ASCII)  # message.chats


class MessageConfig(Section):
    """Chats the owner names for the `message` tool: `message.chats.NAME` is
    `platform:user:ID` (that person's direct chat) or `platform:chat:ID` (a group or a
    channel). Who may send to each: `tools.message:NAME` (the owner alone until
    allowed). A person's own linked accounts need no entry (`tools.message`)."""

    chats: dict[str, str] = Field(default_factory=dict)
    per_person_per_hour: float = Field(default=30.0, gt=0, le=10_000)
    per_person_burst: int = Field(default=5, ge=1, le=1_000)
    max_chars: int = Field(default=4_000, ge=100, le=100_000)

    @field_validator("chats")
    @classmethod
    def _chats(cls, value: dict[str, str]) -> dict[str, str]:
        for name, target in value.items():
            if not MCP_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a chat name: lowercase letters, digits, - and _ "
                    "(up to 40, a letter or digit first)"
                )
            if not TARGET.fullmatch(target):
                raise ValueError(
                    f"message.chats.{name}: {target!r} is not platform:user:ID or "
                    "platform:chat:ID (e.g. slack:user:U0123ABCD, telegram:chat:-1001234)"
                )
        return value


class McpServerConfig(Section):
    """One MCP server: a command run over stdio, or a streamable HTTP `url`. Secrets are
    referenced by the NAME of an environment variable, never written here: `env` maps
    the server's variable to ours, `headers` an HTTP header to ours."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)  # THEIR_VAR: OUR_VAR holding the value
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)  # Header-Name: OUR_VAR
    include: list[str] = Field(default_factory=list)  # only these tools ([]: all)
    exclude: list[str] = Field(default_factory=list)  # never these
    timeout: float = Field(default=60.0, gt=0, le=3600)  # one call
    startup_timeout: float = Field(default=30.0, gt=0, le=600)  # started and tools listed
    max_result_chars: int = Field(default=20_000, ge=200, le=1_000_000)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server has either a command (stdio) or a url (HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("an MCP server's url starts with http:// or https://")
        return self


class McpConfig(Section):
    """MCP servers the owner plugs in (`mcp.servers.NAME`); who may use each one's tools:
    `tools.mcp:NAME` (the owner alone until allowed)."""

    servers: dict[str, McpServerConfig] = Field(default_factory=dict)

    @field_validator("servers")
    @classmethod
    def _names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in value:
            if not MCP_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a server name: lowercase letters, digits, - and _ "
                    "(up to 40, a letter or digit first)"
                )
        return value
