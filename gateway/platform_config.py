"""Config models of the platforms (`platforms.<name>` in config.yaml), off until enabled."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hermes.config import Section


class PlatformConfig(Section):
    enabled: bool = False
    allowed_users: list[str] = Field(default_factory=list)  # platform user ids
    allowed_chats: list[str] = Field(default_factory=list)  # group chats open to everyone in them
    group_scope: Literal["per_user", "per_chat"] = "per_user"
    answer_without_mention: list[str] = Field(default_factory=list)  # group chat ids
    streaming: bool | None = None  # replies shown as they are written; unset: gateway's


class TelegramConfig(PlatformConfig):
    token_env: str = "TELEGRAM_BOT_TOKEN"
    mode: Literal["polling", "webhook"] = "polling"
    base_url: str | None = None  # a self-hosted Bot API server (or a test fake)
    webhook_url: str | None = None  # webhook mode: the public https URL of gateway.http
    webhook_secret_env: str = "TELEGRAM_WEBHOOK_SECRET"


class DiscordConfig(PlatformConfig):
    token_env: str = "DISCORD_BOT_TOKEN"
    api_base: str | None = None
    gateway_url: str | None = None


class SlackConfig(PlatformConfig):
    bot_token_env: str = "SLACK_BOT_TOKEN"
    app_token_env: str = "SLACK_APP_TOKEN"
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    mode: Literal["socket", "http"] = "socket"
    api_base: str | None = None


class PlatformsConfig(Section):
    telegram: TelegramConfig = TelegramConfig()
    discord: DiscordConfig = DiscordConfig()
    slack: SlackConfig = SlackConfig()


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


class GatewaySection(Section):
    http: HttpConfig = HttpConfig()
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
