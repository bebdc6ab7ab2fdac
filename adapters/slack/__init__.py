"""Slack (slack-bolt, Socket Mode or the Events API): everything the gateway knows
about it is here."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from gateway.edge.platform_config import Credential, Platform, PlatformConfig, Setup, WebhookCheck

if TYPE_CHECKING:
    from gateway.edge.ports import MenuEntry, PlatformAdapter


class SlackConfig(PlatformConfig):
    bot_token_env: str = "SLACK_BOT_TOKEN"
    app_token_env: str = "SLACK_APP_TOKEN"
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    mode: Literal["socket", "http"] = "socket"
    api_base: str | None = None


def _token_shape(prefix: str, kind: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value.startswith(prefix):
            return None
        other = {"xoxb-": "a bot token (xoxb-)", "xapp-": "an app-level token (xapp-)"}
        for start, what in other.items():
            if value.startswith(start):
                return f"holds {what}, not the {kind} token ({prefix}...): are the two swapped?"
        return f"does not look like a Slack {kind} token (it starts with {prefix})"

    return check


def _credentials(config: SlackConfig) -> list[Credential]:
    needed = [Credential("bot_token_env", _token_shape("xoxb-", "bot"))]
    if config.mode == "http":
        needed.append(Credential("signing_secret_env"))
    else:
        needed.append(Credential("app_token_env", _token_shape("xapp-", "app")))
    return needed


def _build(
    config: SlackConfig, values: Mapping[str, str], _menu: Sequence[MenuEntry], _announce: bool
) -> PlatformAdapter:
    """Slack's menu is `/hermes help`, answered from the same command table."""
    from adapters.slack.adapter import SlackAdapter  # noqa: PLC0415 - the SDK

    if config.mode == "http":
        return SlackAdapter(
            values["bot_token_env"],
            api_base=config.api_base,
            signing_secret=values["signing_secret_env"],
        )
    return SlackAdapter(values["bot_token_env"], values["app_token_env"], api_base=config.api_base)


def _webhook(config: SlackConfig, http_port: int) -> WebhookCheck | None:
    if config.mode != "http":
        return None
    return WebhookCheck(
        True,
        f"Slack must POST to https://<your host>/slack/events, proxied to gateway.http "
        f"port {http_port}",
    )


PLATFORM = Platform(
    name="slack",
    config=SlackConfig,
    credentials=_credentials,
    build=_build,
    extra="slack",
    setup=Setup(
        section="""\
  slack:
    enabled: true
    mode: {mode}  # socket (Socket Mode, no public URL) or http (Events API)
    bot_token_env: SLACK_BOT_TOKEN       # xoxb-...
    app_token_env: SLACK_APP_TOKEN       # xapp-... (socket mode)
    signing_secret_env: SLACK_SIGNING_SECRET  # http mode
    allowed_users: {allowed}    # Slack member ids (U...)
""",
        account_hint="your Slack member id (profile, then Copy member ID: U...)",
        modes=("socket", "http"),
    ),
    webhook=_webhook,
    log_secrets=r"\bxox[abposr]-[\w-]{10,}|\bxapp-\d-[\w-]{10,}",  # bot, user and app tokens
)
