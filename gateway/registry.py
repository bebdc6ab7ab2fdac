"""One entry per platform: where its adapter lives, how to build it, how to install it.

Adding a platform touches its adapter module, its config model and one line here.
Adapters are imported lazily, so a missing SDK only matters when the platform is on.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.config import ConfigError, secret
from gateway.platform_config import DiscordConfig, PlatformConfig, SlackConfig, TelegramConfig
from gateway.ports import LocalChat, MenuEntry, PlatformAdapter

Menu = Sequence[MenuEntry]


@dataclass(frozen=True, slots=True)
class PlatformEntry:
    name: str
    module: str
    install_hint: str
    build: Callable[[Any, PlatformConfig, Mapping[str, str] | None, Menu], PlatformAdapter]


def _telegram(
    module: Any, config: PlatformConfig, env: Mapping[str, str] | None, menu: Menu
) -> PlatformAdapter:
    assert isinstance(config, TelegramConfig)
    token = _require(config.token_env, "platforms.telegram.token_env", env)
    webhook = None
    if config.mode == "webhook":
        if not config.webhook_url:
            raise ConfigError("platforms.telegram.webhook_url: required in webhook mode")
        secret = _require(config.webhook_secret_env, "platforms.telegram.webhook_secret_env", env)
        webhook = module.Webhook(config.webhook_url, secret)
    adapter: PlatformAdapter = module.TelegramAdapter(
        token, base_url=config.base_url, webhook=webhook, menu=menu
    )
    return adapter


def _slack(
    module: Any, config: PlatformConfig, env: Mapping[str, str] | None, _menu: Menu
) -> PlatformAdapter:
    """Slack's menu is `/hermes help`, answered from the same command table."""
    assert isinstance(config, SlackConfig)
    bot = _require(config.bot_token_env, "platforms.slack.bot_token_env", env)
    if config.mode == "http":
        secret = _require(config.signing_secret_env, "platforms.slack.signing_secret_env", env)
        http: PlatformAdapter = module.SlackAdapter(
            bot, api_base=config.api_base, signing_secret=secret
        )
        return http
    app = _require(config.app_token_env, "platforms.slack.app_token_env", env)
    adapter: PlatformAdapter = module.SlackAdapter(bot, app, api_base=config.api_base)
    return adapter


def _discord(
    module: Any, config: PlatformConfig, env: Mapping[str, str] | None, menu: Menu
) -> PlatformAdapter:
    assert isinstance(config, DiscordConfig)
    token = _require(config.token_env, "platforms.discord.token_env", env)
    adapter: PlatformAdapter = module.DiscordAdapter(
        token, api_base=config.api_base, gateway_url=config.gateway_url, menu=menu
    )
    return adapter


def _cli(
    module: Any, _config: PlatformConfig, _env: Mapping[str, str] | None, _menu: Menu
) -> PlatformAdapter:
    adapter: PlatformAdapter = module.CliAdapter()
    return adapter


def _hint(extra: str) -> str:
    """How to add a platform's SDK: the package is installed from its checkout."""
    return f"pip install '/path/to/hermes[{extra}]' into the gateway's venv (deploy/README.md)"


REGISTRY: dict[str, PlatformEntry] = {
    "telegram": PlatformEntry(
        "telegram", "adapters.telegram_adapter", _hint("telegram"), _telegram
    ),
    "discord": PlatformEntry("discord", "adapters.discord_adapter", _hint("discord"), _discord),
    "slack": PlatformEntry("slack", "adapters.slack_adapter", _hint("slack"), _slack),
    # the terminal: always installed, never enabled in config (`hermes chat` runs it)
    "cli": PlatformEntry("cli", "adapters.cli_adapter", "reinstall hermes-gateway", _cli),
}


def credential_problems(
    name: str, config: PlatformConfig, env: Mapping[str, str] | None = None
) -> list[str]:
    """Every missing or malformed credential of an enabled platform, at once, before
    anything connects: a swapped Slack token or a Telegram token with a `bot` prefix is
    named precisely instead of surfacing as a 401 or a DNS error later."""
    needed: list[tuple[str, str, Callable[[str], str | None]]] = []
    if isinstance(config, TelegramConfig):
        needed.append(("token_env", config.token_env, _telegram_shape))
        if config.mode == "webhook":
            needed.append(("webhook_secret_env", config.webhook_secret_env, _any_shape))
    elif isinstance(config, SlackConfig):
        needed.append(("bot_token_env", config.bot_token_env, _slack_shape("xoxb-", "bot")))
        if config.mode == "http":
            needed.append(("signing_secret_env", config.signing_secret_env, _any_shape))
        else:
            needed.append(("app_token_env", config.app_token_env, _slack_shape("xapp-", "app")))
    elif isinstance(config, DiscordConfig):
        needed.append(("token_env", config.token_env, _discord_shape))
    problems = []
    for key, env_name, shape in needed:
        value = secret(env_name, env)
        if not value:
            problems.append(f"platforms.{name}.{key}: set the environment variable {env_name}")
        elif (wrong := shape(value)) is not None:
            problems.append(f"platforms.{name}.{key}: {env_name} {wrong}")
    return problems


def _any_shape(_value: str) -> str | None:
    return None


def _telegram_shape(value: str) -> str | None:
    if value.lower().startswith("bot"):
        return "starts with 'bot': give the token alone, as @BotFather shows it"
    if not re.fullmatch(r"\d+:[\w-]+", value):
        return "is not a Telegram bot token (digits, a colon, then letters: 123456:ABC-DEF...)"
    return None


def _slack_shape(prefix: str, kind: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value.startswith(prefix):
            return None
        other = {"xoxb-": "a bot token (xoxb-)", "xapp-": "an app-level token (xapp-)"}
        for start, what in other.items():
            if value.startswith(start):
                return f"holds {what}, not the {kind} token ({prefix}...): are the two swapped?"
        return f"does not look like a Slack {kind} token (it starts with {prefix})"

    return check


def _discord_shape(value: str) -> str | None:
    if value.lower().startswith("bot "):
        return "starts with 'Bot ': give the token alone, as the Developer Portal shows it"
    if re.search(r"\s", value):
        return "contains spaces: copy the token again"
    return None


def build(
    name: str, config: PlatformConfig, env: Mapping[str, str] | None = None, menu: Menu = ()
) -> PlatformAdapter:
    entry = REGISTRY.get(name)
    if entry is None:
        raise ConfigError(f"platforms.{name}: this platform is not available yet")
    problems = credential_problems(name, config, env)
    if problems:
        raise ConfigError("; ".join(problems))
    try:
        module = importlib.import_module(entry.module)
    except ImportError as exc:
        raise ConfigError(
            f"platforms.{name} is enabled but its SDK is missing ({exc.name}): {entry.install_hint}"
        ) from None
    return entry.build(module, config, env, menu)


def local_chat() -> LocalChat:
    """The terminal's adapter, for `hermes chat`."""
    adapter = build("cli", PlatformConfig())
    assert isinstance(adapter, LocalChat)
    return adapter


def _require(env_name: str, key: str, env: Mapping[str, str] | None) -> str:
    value = secret(env_name, env)
    if not value:
        raise ConfigError(f"{key}: set the environment variable {env_name} (the token)")
    return value
