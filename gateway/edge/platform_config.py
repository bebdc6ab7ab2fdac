"""What a platform package declares (`Platform`), the config every platform shares
(`PlatformConfig`, `platforms.<name>` in config.yaml, off until enabled), and the
gateway's own sections beside them.

A platform lives in one package, `adapters/<name>/`: its `__init__` holds `PLATFORM`, a
`Platform` (its config model, credentials and their shapes, how `hermes init` writes
and asks for it, its doctor webhook check, the shapes of its secrets for the log filter,
and `build`, which imports the SDK code only when the platform is used); `adapter.py` is
the SDK code, a render module its dialect. `gateway/edge/platforms.py` lists the packages.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, create_model

from gateway.edge.platforms import PACKAGES
from hermes.config import Section

if TYPE_CHECKING:
    from gateway.edge.ports import MenuEntry, PlatformAdapter

# what is wrong with a credential's value, in words after its variable's name (None: fine)
Shape = Callable[[str], "str | None"]


def any_shape(_value: str) -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class Credential:
    """A secret the platform needs: the config key naming its environment variable."""

    key: str  # e.g. "token_env"; the variable's name is the config's value of it
    shape: Shape = any_shape


@dataclass(frozen=True, slots=True)
class Setup:
    """How `hermes init --gateway` writes the platform's section and asks about it."""

    section: str  # config.yaml lines; {mode}, {webhook_url} and {allowed} are filled in
    account_hint: str  # where a person finds their own account id
    modes: tuple[str, ...] = ()  # how it connects; the first is the default
    url_modes: tuple[str, ...] = ()  # modes whose section holds the https URL it pushes to


@dataclass(frozen=True, slots=True)
class WebhookCheck:
    ok: bool
    detail: str
    fix: str = ""


# How several gateway processes on one database share a platform's connection:
# "shared": each instance receives its part (webhooks behind a load balancer, Slack's
# Events API, Socket Mode with a connection per instance); "leased": one connection for
# all, held by one instance under a lease and taken over when it dies (Discord's gateway
# websocket); "sole": one consumer only, never shared (Telegram's getUpdates): refused
# while another instance runs.
Sharing = Literal["shared", "leased", "sole"]


def always_shared(_config: Any) -> Sharing:
    return "shared"


@dataclass(frozen=True, slots=True)
class Platform:
    name: str
    config: type[PlatformConfig]
    # the credentials this config needs (by mode), each checked before anything connects
    credentials: Callable[[Any], Sequence[Credential]]
    # the adapter, from its config, the credentials' values by key, the command menu
    # and whether it announces itself to the platform (a push URL: one instance does,
    # the maintenance leader); imports the SDK code (ImportError: not installed;
    # ValueError: a config mistake)
    build: Callable[[Any, Mapping[str, str], Sequence[MenuEntry], bool], PlatformAdapter]
    sharing: Callable[[Any], Sharing] = always_shared
    extra: str = ""  # the pip extra that installs its SDK ('' : always installed)
    setup: Setup | None = None  # None: never in config.yaml (the terminal)
    webhook: Callable[[Any, int], WebhookCheck | None] | None = None  # doctor, push modes
    log_secrets: str = ""  # a regex of its secrets' shapes, masked in every log line


@functools.cache
def platforms() -> dict[str, Platform]:
    """Every platform of gateway/edge/platforms.py, by name: each package's `PLATFORM`
    (light: no SDK is imported)."""
    found = {}
    for name, package in PACKAGES.items():
        platform = importlib.import_module(package).PLATFORM
        assert isinstance(platform, Platform) and platform.name == name, package
        found[name] = platform
    return found


class PlatformConfig(Section):
    enabled: bool = False
    allowed_users: list[str] = Field(default_factory=list)  # platform user ids
    allowed_chats: list[str] = Field(default_factory=list)  # group chats open to everyone in them
    group_scope: Literal["per_user", "per_chat"] = "per_user"
    answer_without_mention: list[str] = Field(default_factory=list)  # group chat ids
    streaming: bool | None = None  # replies shown as they are written; unset: gateway's


def platforms_model() -> type[Section]:
    """`platforms:` in config.yaml: one section per platform configured there."""
    fields: dict[str, Any] = {
        name: (platform.config, platform.config())
        for name, platform in platforms().items()
        if platform.setup is not None
    }
    return create_model("PlatformsConfig", __base__=Section, **fields)


class AccessConfig(Section):
    allow_all: bool = False  # default deny: only allowlisted users reach the assistant
    pairing: bool = True  # strangers' DMs get a code the operator can approve
    max_pending_pairings: int = Field(default=3, ge=1)  # per platform
    pairing_codes_per_day: int = Field(default=3, ge=1)  # per requester


class PrivacyConfig(Section):
    # full: personal memory in group chats too; none: group sessions get no personal
    # stores in the prompt and memory writes are refused there
    group_memory: Literal["full", "none"] = "full"


class HttpConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)  # 0: any free port
    # connections open at once; past it new ones are closed at once (well under the
    # process's file limit, so a flood of slow clients cannot exhaust it)
    max_connections: int = Field(default=512, ge=1, le=100_000)
    # each request's headers and body must arrive, and its response begin, within this
    # long (from the connection's start or the last response): slow clients are cut off
    read_timeout_seconds: float = Field(default=15.0, gt=0, le=600)


class ClusterConfig(Section):
    """Several gateway processes on one PostgreSQL database (ignored on SQLite, where
    one process runs per home)."""

    # a session, the maintenance leader and Discord's connection are each held under a
    # lease renewed every third of this; an instance that dies loses them this long
    # after its last renewal, and another continues
    lease_seconds: float = Field(default=30.0, ge=2, le=300)
    # how often each instance looks for waiting sessions nobody holds (the fallback
    # when a NOTIFY wake-up is lost, e.g. behind a pooler in transaction mode)
    poll_seconds: float = Field(default=1.0, gt=0, le=60)


class GatewaySection(Section):
    http: HttpConfig = HttpConfig()
    cluster: ClusterConfig = ClusterConfig()
    queue_mode: Literal["queue", "merge"] = "queue"
    # what one person may send: a burst, then this many per minute (messages, commands
    # and button presses alike); past it events are dropped with one notice a minute
    per_person_burst: int = Field(default=30, ge=1, le=10_000)
    per_person_per_minute: float = Field(default=60.0, gt=0, le=100_000)
    # replies appear as the model writes them (one message edited in place); `off`:
    # each reply arrives whole. Per platform: platforms.<name>.streaming
    streaming: bool = True
    # a platform that fails to start is retried with backoff (capped, jittered); if no
    # enabled platform has connected after this long, the process exits non-zero so its
    # supervisor restarts it (0: never)
    connect_timeout_seconds: float = Field(default=300.0, ge=0, le=86_400)
    retry_max_seconds: float = Field(default=60.0, ge=1, le=3600)
    # at a stop (SIGTERM), turns running are given this long to end (the supervisor's own
    # stop timeout must be longer: systemd's TimeoutStopSec, compose's stop_grace_period)
    stop_grace_seconds: float = Field(default=20.0, ge=0, le=600)
