"""The one place that reads config files and the environment.

`load_config(home)` reads `$HERMES_HOME/config.yaml` once into pydantic models with
`extra="forbid"`, so a typo fails at start with the key and the file named.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import quote, urlsplit

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from gateway.edge.platform_config import (
    AccessConfig,
    GatewaySection,
    PlatformConfig,
    PrivacyConfig,
    platforms_model,
)
from hermes import extras
from hermes.config import (
    AgentConfig,
    AuxiliaryConfig,
    AuxiliaryTaskConfig,
    EmbeddingsConfig,
    LLMConfig,
    McpConfig,
    MediaConfig,
    MemoryConfig,
    MessageConfig,
    SearchConfig,
    Section,
    SessionsConfig,
    TranscriptionConfig,
    WebConfig,
)
from hermes.llm.endpoint import Endpoint
from hermes.providers.base import ConfigField
from hermes.tools import capabilities

CONFIG_FILENAME = "config.yaml"


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file and the key."""


# `platforms:`: a section per platform package (gateway/edge/platforms.py), each its own model
if TYPE_CHECKING:
    from hermes.state.db import SessionDB
    from hermes.tools.mcp import McpLaunch

    PlatformsConfig = Section
else:
    PlatformsConfig = platforms_model()


KeptLevel = Literal["info", "warning", "error"]
_KEEP_DAYS: dict[KeptLevel, int] = {"warning": 14, "error": 90}


class LoggingConfig(Section):
    """The gateway process's log (stderr; journald or the container runtime keeps it)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"
    third_party: Literal["debug", "info", "warning", "error"] = "warning"  # httpx, SDKs
    # days each level's lines are kept in state.db (every instance's, across restarts:
    # the dashboard's Logs page and its problems); a level not named is not stored
    keep_days: dict[KeptLevel, Annotated[int, Field(ge=1, le=3650)]] = Field(
        default_factory=_KEEP_DAYS.copy
    )

    def stored_levels(self) -> dict[int, int]:
        """`keep_days` by level number (info 20, warning 30, error 40)."""
        return {logging.getLevelName(name.upper()): days for name, days in self.keep_days.items()}


class DatabaseConfig(Section):
    """Where state.db lives: the SQLite file in the home (no `url`, the default), or a
    PostgreSQL database (`url: postgresql://USER@HOST:5432/NAME`, options such as
    `?sslmode=verify-full` allowed) whose password is read from the environment variable
    `password_env` names, never from the file."""

    url: str | None = None
    password_env: str | None = None
    pool_size: int = Field(default=5, ge=1, le=100)  # connections per process
    # how long `gateway run` waits for a server that is not there yet (a boot where the
    # gateway starts before PostgreSQL) before it exits 75, which its unit restarts
    startup_wait_seconds: float = Field(default=60.0, ge=0, le=3600)

    @field_validator("url")
    @classmethod
    def _postgresql(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        scheme, sep, rest = value.strip().partition("://")
        if not sep or scheme not in ("postgresql", "postgres"):
            raise ValueError(
                "a PostgreSQL URL: postgresql://USER@HOST:5432/DATABASE (leave it out for "
                "the SQLite file in the home)"
            )
        credentials = rest.split("/", 1)[0].rpartition("@")[0]
        if ":" in credentials:
            raise ValueError(
                "the URL holds a password: remove it and name the environment variable "
                "that holds it in database.password_env"
            )
        return value.strip()


class DashboardConfig(Section):
    """The operator's web dashboard under `/admin/` on the gateway's HTTP server
    (gateway/dashboard/). On a bind other than loopback it is served only when
    `public_url` is an https address (a TLS reverse proxy in front)."""

    enabled: bool = True
    public_url: str | None = None  # https://bot.example.com (what login links point to)
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    link_minutes: float = Field(default=10.0, gt=0, le=60)  # a /dashboard link's life
    # the reverse proxies whose X-Forwarded-For is believed (addresses or networks): a
    # client that reaches the port directly cannot name itself another client
    trusted_proxies: list[str] = Field(default_factory=lambda: ["127.0.0.1", "::1"])

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an address or a network (CIDR)") from None
        return value

    @field_validator("public_url")
    @classmethod
    def _an_address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname or parts.path:
            raise ValueError("public_url must be an address like https://HOST[:PORT]")
        return value


class HermesConfig(Section):
    """The whole config.yaml."""

    database: DatabaseConfig = DatabaseConfig()

    memory: MemoryConfig = MemoryConfig()
    llm: LLMConfig = LLMConfig()
    agent: AgentConfig = AgentConfig()
    sessions: SessionsConfig = SessionsConfig()
    platforms: PlatformsConfig = PlatformsConfig()
    access: AccessConfig = AccessConfig()
    privacy: PrivacyConfig = PrivacyConfig()
    gateway: GatewaySection = GatewaySection()
    auxiliary: AuxiliaryConfig = AuxiliaryConfig()
    search: SearchConfig = SearchConfig()
    transcription: TranscriptionConfig = TranscriptionConfig()
    media: MediaConfig = MediaConfig()
    logging: LoggingConfig = LoggingConfig()
    dashboard: DashboardConfig = DashboardConfig()
    web: WebConfig = WebConfig()
    mcp: McpConfig = McpConfig()
    message: MessageConfig = MessageConfig()
    # who may use each tool group: roles and people (hermes/tools/capabilities.py)
    tools: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("tools")
    @classmethod
    def _tool_groups(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        return {
            capabilities.check_group(group): list(
                dict.fromkeys(capabilities.check_entry(e) for e in entries)
            )
            for group, entries in value.items()
        }

    @model_validator(mode="after")
    def _memory_beside_the_database(self) -> HermesConfig:
        """A PostgreSQL database holds the memory stores too, unless memory.backend
        says files (then they stay on this machine's disk)."""
        if self.memory.backend is None:
            implied = "database" if self.database.url else "files"
            memory = self.memory.model_copy(update={"backend": implied})
            object.__setattr__(self, "memory", memory)  # frozen: set once, while validated
        return self


def dashboard_refusal(config: HermesConfig) -> str | None:
    """Why the dashboard may not be served, or None. A login page on a bind other than
    loopback without TLS in front would send passwords and cookies in the clear."""
    section, http = config.dashboard, config.gateway.http
    if not section.enabled:
        return "dashboard.enabled is false"
    if is_loopback(http.host):
        return None
    if section.public_url and section.public_url.startswith("https://"):
        return None
    return (
        f"gateway.http.host is {http.host}, reachable from other machines, and "
        "dashboard.public_url is not an https:// address: put the gateway behind a TLS "
        "reverse proxy and set dashboard.public_url to its address (deploy/README.md), "
        "or bind gateway.http.host to 127.0.0.1 and reach it through an SSH tunnel"
    )


def dashboard_address(config: HermesConfig, listening: str) -> str:
    """Where the dashboard is reached: `public_url`, else the HTTP server's address as
    it listens (`listening`: HOST:PORT)."""
    if config.dashboard.public_url:
        return config.dashboard.public_url + "/admin/"
    return f"http://{listening}/admin/"


def is_loopback(host: str) -> bool:
    """Whether a bind address is reachable from this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def resolve_home(env: Mapping[str, str] | None = None) -> Path:
    """`$HERMES_HOME`, or `~/.hermes` when unset or empty."""
    environ = os.environ if env is None else env
    raw = environ.get("HERMES_HOME", "").strip()
    return Path(raw).expanduser() if raw else Path.home() / ".hermes"


def load_config(home: Path) -> HermesConfig:
    """Read `home/config.yaml`; a missing or empty file means all defaults."""
    path = home / CONFIG_FILENAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return HermesConfig()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc}") from exc
    return parse_config(text, source=str(path))


def parse_config(text: str, source: str) -> HermesConfig:
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if data is None:
        return HermesConfig()
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the top level must be a mapping of sections, got {data!r:.60}"
        )
    try:
        return HermesConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None


REMOVE = object()  # a value for update_config: take the key out (its default applies)


def update_config(home: Path, changes: Mapping[tuple[str, ...], Any]) -> Path:
    """Set keys of `home/config.yaml` (each change: a key path and its value, REMOVE to
    take the key out), keeping the file's comments and order; the result is validated
    before it replaces the file (atomically, 0600). Raises ConfigError, leaving the file
    as it was."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    path = home / CONFIG_FILENAME
    editor = YAML()  # round-trip: comments, order and quoting survive
    try:
        data = editor.load(path.read_text(encoding="utf-8")) if path.exists() else None
    except (OSError, UnicodeDecodeError, YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc}") from None
    if data is None:
        data = editor.load("{}")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    for keys, value in changes.items():
        node = data
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        if value is REMOVE:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    buffer = io.StringIO()
    editor.dump(data, buffer)
    text = buffer.getvalue()
    parse_config(text, source=str(path))  # never write a config that would not load
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_suffix(".yaml.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(0o600)
    temporary.replace(path)
    return path


def _describe(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid config"]
    for err in exc.errors():
        key = ".".join(str(part) for part in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            lines.append(f"  {key}: unknown key (check the spelling against config.example.yaml)")
        else:
            lines.append(f"  {key}: {err['msg']} (got {err.get('input')!r:.60})")
    return "\n".join(lines)


def main_endpoint(config: HermesConfig, env: Mapping[str, str] | None = None) -> Endpoint | None:
    """The configured main model, or None when `llm.base_url`/`llm.model` are not set."""
    llm = config.llm
    if not llm.base_url or not llm.model:
        return None
    return Endpoint(
        base_url=llm.base_url,
        model=llm.model,
        api_key=_key(llm.api_key_env, env),
        timeout=llm.timeout,
        max_retries=llm.max_retries,
        temperature=llm.temperature,
        deadline=llm.deadline,
    )


def database_url(config: HermesConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The PostgreSQL URL with its password from the environment; None: SQLite."""
    database = config.database
    if database.url is None:
        return None
    if absent := extras.needs("postgres", "database.url (state.db on PostgreSQL)"):
        raise ConfigError(absent)
    if not database.password_env:
        return database.url
    environ = os.environ if env is None else env
    password = environ.get(database.password_env)
    if not password:
        raise ConfigError(
            f"database.password_env names {database.password_env}, which is not set: export "
            "the database password in it (the service's environment file) or remove the "
            "key for a server that needs none"
        )
    scheme, _, rest = database.url.partition("://")
    user, at, host = rest.partition("@")
    if not at:
        raise ConfigError(
            "database.url names no user (postgresql://USER@HOST/DATABASE): a password needs one"
        )
    return f"{scheme}://{user}:{quote(password, safe='')}@{host}"


def mcp_servers(
    config: HermesConfig, env: Mapping[str, str] | None = None
) -> tuple[dict[str, McpLaunch], dict[str, str]]:
    """The MCP servers of config.yaml, their secrets read from the environment: the
    launchable ones, and why each other one cannot start (a variable not set). A stdio
    server's process gets the SDK's usual few variables (PATH, HOME…) and those it names."""
    from hermes.tools.mcp import McpLaunch

    source = os.environ if env is None else env
    launches, problems = {}, {}
    for name, server in config.mcp.servers.items():
        missing = [
            ours
            for ours in [*server.env.values(), *server.headers.values()]
            if not source.get(ours)
        ]
        if missing:
            problems[name] = f"the variable {missing[0]} is not set"
            continue
        child = {
            k: source[k] for k in ("HOME", "PATH", "SHELL", "TERM", "LANG", "USER") if k in source
        }
        child.update({theirs: source[ours] for theirs, ours in server.env.items()})
        headers = {header: source[ours] for header, ours in server.headers.items()}
        launches[name] = McpLaunch(name, server, child, headers)
    return launches, problems


def child_environment() -> dict[str, str]:
    """The environment a helper program (pg_dump, pg_restore) runs in: this process's."""
    return dict(os.environ)


def open_state(home: Path, config: HermesConfig, env: Mapping[str, str] | None = None) -> SessionDB:
    """state.db as config.yaml says: the file in `home`, or the PostgreSQL database."""
    from hermes.state.db import SessionDB

    return SessionDB.open(home, database_url(config, env), config.database.pool_size)


class SideTask(StrEnum):
    """The work done beside a turn, each with its section under `auxiliary`."""

    SESSION_SEARCH = "session_search"  # summaries of search hits
    MEMORY = "memory"  # consolidation, the guard's judge, compression, the session review


def side_endpoint(
    config: HermesConfig, task: SideTask, env: Mapping[str, str] | None = None
) -> Endpoint | None:
    """The one place that decides which model (and timeout) a side task uses: the
    task's model, else auxiliary's, else the main one; None when none is configured."""
    section: AuxiliaryTaskConfig = getattr(config.auxiliary, task.value)
    aux, llm = config.auxiliary, config.llm
    base_url = aux.base_url or llm.base_url
    model = section.model or aux.model or llm.model
    if not base_url or not model:
        return None
    return Endpoint(
        base_url=base_url,
        model=model,
        api_key=_key(aux.api_key_env or llm.api_key_env, env),
        timeout=section.timeout,
        max_retries=llm.max_retries,
        temperature=aux.temperature,
        deadline=llm.deadline,
    )


def embeddings_endpoint(
    config: HermesConfig, env: Mapping[str, str] | None = None
) -> Endpoint | None:
    """The embeddings model (`search.embeddings`), or None when hybrid search is off."""
    emb: EmbeddingsConfig = config.search.embeddings
    return _beside_llm(
        config,
        env,
        model=emb.model,
        base_url=emb.base_url,
        api_key_env=emb.api_key_env,
        timeout=emb.timeout,
    )


def transcription_endpoint(
    config: HermesConfig, env: Mapping[str, str] | None = None
) -> Endpoint | None:
    """The speech-to-text model (`transcription`), or None when off or unplaceable."""
    section = config.transcription
    if not section.enabled:
        return None
    return _beside_llm(
        config,
        env,
        model=section.model,
        base_url=section.base_url,
        api_key_env=section.api_key_env,
        timeout=section.timeout,
    )


def _beside_llm(
    config: HermesConfig,
    env: Mapping[str, str] | None,
    *,
    model: str | None,
    base_url: str | None,
    api_key_env: str | None,
    timeout: float,
) -> Endpoint | None:
    """A side model's endpoint; its unset base URL and key fall back to the `llm` ones."""
    url = base_url or config.llm.base_url
    if not model or not url:
        return None
    key = _key(api_key_env or config.llm.api_key_env, env)
    return Endpoint(
        base_url=url,
        model=model,
        api_key=key,
        timeout=timeout,
        max_retries=config.llm.max_retries,
        deadline=config.llm.deadline,
    )


def enabled_platforms(config: HermesConfig) -> dict[str, PlatformConfig]:
    """The platforms switched on in config, by name (what the gateway runs and doctor
    checks)."""
    sections = config.platforms
    return {
        name: section
        for name in type(sections).model_fields
        if (section := getattr(sections, name)).enabled
    }


def judge_wanted(config: HermesConfig) -> bool:
    """Whether a model judges memory writes (`memory.scan.judge`, on unless switched off)."""
    return config.memory.scan.judge != "off"


def provider_settings(
    fields: list[ConfigField], raw: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A memory provider's settings from `memory.providers.<name>`: plain values as
    written (or the field's default); a secret field's value from the environment
    variable named by `<key>_env` (or the field's own env var): config.yaml never holds
    the secret itself."""
    quiet_vendor_sdks()
    settings = {k: v for k, v in raw.items() if not k.endswith("_env")}
    for field in fields:
        if field.secret:
            settings[field.key] = secret(
                str(raw.get(f"{field.key}_env") or field.env_var or ""), env
            )
        elif field.key not in settings and field.default is not None:
            settings[field.key] = field.default
    return settings


def quiet_vendor_sdks() -> None:
    """Before a provider's client library is imported: the ones that phone home or
    write under ~ are told not to (unless the operator said otherwise in the
    environment). mem0ai sends PostHog telemetry unless MEM0_TELEMETRY is false, and
    makes ~/.mem0 at import (MEM0_DIR: under HERMES_HOME instead)."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    ours = resolve_home() / "providers" / "mem0"
    os.environ.setdefault("MEM0_DIR", str(ours))
    if Path(os.environ["MEM0_DIR"]) == ours and ours.parent.parent.is_dir():
        # made owner-only before mem0ai makes it 0755 at import (doctor's home check
        # failed on a healthy Mem0 from the second run on); one it made already, mended
        ours.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            ours.parent.chmod(0o700)
            ours.chmod(0o700)


def _key(name: str | None, env: Mapping[str, str] | None) -> str | None:
    return secret(name, env) if name else None


def env_names(config: HermesConfig) -> dict[str, str]:
    """Every environment variable the config names for a secret, by where: each `*_env`
    setting of every section (and of each memory provider's settings), each MCP server's
    `env` and `headers` value ("llm.api_key_env" -> "OPENAI_API_KEY")."""
    found: dict[str, str] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, BaseModel):
            for field in type(node).model_fields:
                walk(getattr(node, field), f"{where}.{field}" if where else field)
        elif isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, str) and node and where.endswith("_env"):
            found[where] = node

    walk(config, "")
    for name, server in config.mcp.servers.items():
        for part in ("env", "headers"):
            for key, value in getattr(server, part).items():
                found[f"mcp.servers.{name}.{part}.{key}"] = value
    return found


def secret(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The value of the environment variable `name` (secrets are referenced by name)."""
    return (os.environ if env is None else env).get(name) or None if name else None
