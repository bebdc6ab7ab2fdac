"""One entry per platform: where its adapter lives, how to build it, how to install it.

Adding a platform touches its adapter module, its config model and one line here.
Adapters are imported lazily, so a missing SDK only matters when the platform is on.
"""

from __future__ import annotations

import importlib
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


REGISTRY: dict[str, PlatformEntry] = {
    "telegram": PlatformEntry(
        "telegram", "adapters.telegram_adapter", "pip install 'hermes-gateway[telegram]'", _telegram
    ),
    "discord": PlatformEntry(
        "discord", "adapters.discord_adapter", "pip install 'hermes-gateway[discord]'", _discord
    ),
    "slack": PlatformEntry(
        "slack", "adapters.slack_adapter", "pip install 'hermes-gateway[slack]'", _slack
    ),
    # the terminal: always installed, never enabled in config (`hermes chat` runs it)
    "cli": PlatformEntry("cli", "adapters.cli_adapter", "reinstall hermes-gateway", _cli),
}


def build(
    name: str, config: PlatformConfig, env: Mapping[str, str] | None = None, menu: Menu = ()
) -> PlatformAdapter:
    entry = REGISTRY.get(name)
    if entry is None:
        raise ConfigError(f"platforms.{name}: this platform is not available yet")
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
