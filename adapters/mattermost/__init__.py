"""Mattermost (REST API v4 and its websocket, with aiohttp): everything the gateway
knows about it is here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

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


class MattermostConfig(PlatformConfig):
    url: str = ""  # the server, https://chat.example.org
    token_env: str = "MATTERMOST_TOKEN"  # a bot account's access token
    # where Mattermost POSTs a press of an approval button: https://<gateway>/mattermost/actions
    # (unset: no buttons, the commands are written out to type)
    actions_url: str | None = None


def _credentials(_config: MattermostConfig) -> list[Credential]:
    return [Credential("token_env")]


def _build(
    config: MattermostConfig, values: Mapping[str, str], _menu: Sequence[MenuEntry], _announce: bool
) -> PlatformAdapter:
    from adapters.mattermost.adapter import MattermostAdapter  # noqa: PLC0415 - aiohttp

    if not config.url.startswith(("https://", "http://")):
        raise ValueError("platforms.mattermost.url must be the server's address (https://...)")
    return MattermostAdapter(config.url, values["token_env"], actions_url=config.actions_url)


def _sharing(_config: MattermostConfig) -> Sharing:
    """Every websocket of the bot receives every post: one instance holds it (a lease)."""
    return "leased"


def _webhook(config: MattermostConfig, http_port: int) -> WebhookCheck | None:
    if config.actions_url is None:
        return None
    return WebhookCheck(
        config.actions_url.startswith("https://"),
        f"Mattermost POSTs button presses to {config.actions_url}, proxied to gateway.http "
        f"port {http_port} (/mattermost/actions)",
        "use an https:// address for platforms.mattermost.actions_url",
    )


PLATFORM = Platform(
    name="mattermost",
    config=MattermostConfig,
    credentials=_credentials,
    build=_build,
    sharing=_sharing,
    setup=Setup(
        section="""\
  mattermost:
    enabled: true
    url: https://chat.example.org      # your Mattermost server
    token_env: MATTERMOST_TOKEN        # a bot account's access token
    # actions_url: https://gateway.example.org/mattermost/actions  # approval buttons
    allowed_users: {allowed}    # Mattermost user ids (26 characters)
""",
        account_hint="your Mattermost user id (Profile, then the ... menu: Copy user ID)",
    ),
    webhook=_webhook,
    # a token has the shape of every id (26 lowercase letters and digits): its value is
    # masked in the logs by value (gateway/logs.py secret_values), not by shape
)
