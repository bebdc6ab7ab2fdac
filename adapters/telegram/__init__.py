"""Telegram (python-telegram-bot): everything the gateway knows about it is here."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from gateway.edge.platform_config import (
    Credential,
    Platform,
    PlatformConfig,
    Setup,
    Sharing,
    WebhookCheck,
)

if TYPE_CHECKING:
    from gateway.edge.ports import MenuEntry, PlatformAdapter


class TelegramConfig(PlatformConfig):
    token_env: str = "TELEGRAM_BOT_TOKEN"
    mode: Literal["polling", "webhook"] = "polling"
    base_url: str | None = None  # a self-hosted Bot API server (or a test fake)
    webhook_url: str | None = None  # webhook mode: the public https URL of gateway.http
    webhook_secret_env: str = "TELEGRAM_WEBHOOK_SECRET"


def _token_shape(value: str) -> str | None:
    if value.lower().startswith("bot"):
        return "starts with 'bot': give the token alone, as @BotFather shows it"
    if not re.fullmatch(r"\d+:[\w-]+", value):
        return "is not a Telegram bot token (digits, a colon, then letters: 123456:ABC-DEF...)"
    return None


def _credentials(config: TelegramConfig) -> list[Credential]:
    needed = [Credential("token_env", _token_shape)]
    if config.mode == "webhook":
        needed.append(Credential("webhook_secret_env"))
    return needed


def _build(
    config: TelegramConfig, values: Mapping[str, str], menu: Sequence[MenuEntry], announce: bool
) -> PlatformAdapter:
    if config.mode == "webhook" and not config.webhook_url:
        raise ValueError("webhook_url: required in webhook mode")
    from adapters.telegram.adapter import TelegramAdapter, Webhook  # noqa: PLC0415 - the SDK

    webhook = None
    if config.mode == "webhook":
        assert config.webhook_url is not None
        webhook = Webhook(config.webhook_url, values["webhook_secret_env"], announce=announce)
    return TelegramAdapter(
        values["token_env"], base_url=config.base_url, webhook=webhook, menu=menu
    )


def _webhook(config: TelegramConfig, http_port: int) -> WebhookCheck | None:
    if config.mode != "webhook":
        return None
    url = config.webhook_url or ""
    if not url.startswith("https://"):
        return WebhookCheck(
            False,
            f"webhook_url is {url or 'not set'!r}: Telegram only pushes to https",
            "set platforms.telegram.webhook_url to the public https URL of the reverse "
            "proxy in front of gateway.http",
        )
    return WebhookCheck(True, f"{url} -> gateway.http port {http_port}")


def _sharing(config: TelegramConfig) -> Sharing:
    """getUpdates allows one consumer (a second one's poll ends the first's): polling
    cannot be shared; webhook pushes go to any instance behind the load balancer."""
    return "sole" if config.mode == "polling" else "shared"


PLATFORM = Platform(
    name="telegram",
    config=TelegramConfig,
    credentials=_credentials,
    build=_build,
    sharing=_sharing,
    extra="telegram",
    setup=Setup(
        section="""\
  telegram:
    enabled: true
    token_env: TELEGRAM_BOT_TOKEN  # from @BotFather
    mode: {mode}  # polling, or webhook (Telegram pushes to gateway.http)
    webhook_url: {webhook_url}
    webhook_secret_env: TELEGRAM_WEBHOOK_SECRET
    allowed_users: {allowed}    # Telegram user ids
""",
        account_hint="your Telegram user id (message @userinfobot)",
        modes=("polling", "webhook"),
        url_modes=("webhook",),
    ),
    webhook=_webhook,
    # a bot token, alone or in an API URL (https://api.telegram.org/bot<token>/getMe)
    log_secrets=r"(?<=/bot)\d{5,}:[\w-]{20,}|\b\d{8,10}:[\w-]{35}\b",
)
