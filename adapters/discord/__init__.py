"""Discord (discord.py): everything the gateway knows about it is here."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gateway.edge.platform_config import Credential, Platform, PlatformConfig, Setup, Sharing

if TYPE_CHECKING:
    from gateway.edge.ports import MenuEntry, PlatformAdapter


class DiscordConfig(PlatformConfig):
    token_env: str = "DISCORD_BOT_TOKEN"
    api_base: str | None = None
    gateway_url: str | None = None


def _token_shape(value: str) -> str | None:
    if value.lower().startswith("bot "):
        return "starts with 'Bot ': give the token alone, as the Developer Portal shows it"
    if re.search(r"\s", value):
        return "contains spaces: copy the token again"
    return None


def _credentials(_config: DiscordConfig) -> list[Credential]:
    return [Credential("token_env", _token_shape)]


def _build(
    config: DiscordConfig, values: Mapping[str, str], menu: Sequence[MenuEntry], _announce: bool
) -> PlatformAdapter:
    from adapters.discord.adapter import DiscordAdapter  # noqa: PLC0415 - the SDK

    return DiscordAdapter(
        values["token_env"], api_base=config.api_base, gateway_url=config.gateway_url, menu=menu
    )


def _sharing(_config: DiscordConfig) -> Sharing:
    """A bot's gateway websocket is one connection (without sharding): held by one
    instance under a lease, taken over by another when it dies."""
    return "leased"


PLATFORM = Platform(
    name="discord",
    config=DiscordConfig,
    credentials=_credentials,
    build=_build,
    sharing=_sharing,
    extra="discord",
    setup=Setup(
        section="""\
  discord:
    enabled: true
    token_env: DISCORD_BOT_TOKEN   # enable the Message Content intent for the app
    allowed_users: {allowed}    # Discord user ids (snowflakes)
""",
        account_hint="your Discord user id (Developer Mode, then Copy User ID)",
    ),
    log_secrets=r"\b[MNO][\w-]{23,27}\.[\w-]{6}\.[\w-]{27,40}\b",  # a bot token
)
