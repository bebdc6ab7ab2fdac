"""Credentials are checked for their shape before anything connects, all at once."""

from __future__ import annotations

import pytest

from adapters.discord import DiscordConfig
from adapters.slack import SlackConfig
from adapters.telegram import TelegramConfig
from gateway.config import ConfigError
from gateway.registry import build, credential_problems


def test_every_missing_variable_of_a_platform_is_named_at_once() -> None:
    problems = credential_problems("slack", SlackConfig(enabled=True), {})
    assert problems == [
        "platforms.slack.bot_token_env: set the environment variable SLACK_BOT_TOKEN",
        "platforms.slack.app_token_env: set the environment variable SLACK_APP_TOKEN",
    ]
    with pytest.raises(ConfigError, match=r"SLACK_BOT_TOKEN.*SLACK_APP_TOKEN"):
        build("slack", SlackConfig(enabled=True), {})


@pytest.mark.parametrize(
    ("name", "config", "env", "fragment"),
    [
        (
            "slack",
            SlackConfig(enabled=True),
            {"SLACK_BOT_TOKEN": "xapp-1-A1-2-abc", "SLACK_APP_TOKEN": "xoxb-123-abc"},
            "are the two swapped?",
        ),
        ("telegram", TelegramConfig(enabled=True), {"TELEGRAM_BOT_TOKEN": "bot123:AAH"}, "'bot'"),
        (
            "telegram",
            TelegramConfig(enabled=True),
            {"TELEGRAM_BOT_TOKEN": "https://api.telegram.org"},
            "not a Telegram bot token",
        ),
        ("discord", DiscordConfig(enabled=True), {"DISCORD_BOT_TOKEN": "Bot MTIz.abc"}, "'Bot '"),
    ],
)
def test_a_malformed_token_is_named_precisely(
    name: str, config: object, env: dict[str, str], fragment: str
) -> None:
    problems = credential_problems(name, config, env)  # type: ignore[arg-type]
    assert problems and fragment in problems[0], problems


def test_well_formed_tokens_pass() -> None:
    assert (
        credential_problems(
            "slack",
            SlackConfig(enabled=True),
            {"SLACK_BOT_TOKEN": "xoxb-1-2-abc", "SLACK_APP_TOKEN": "xapp-1-A1-2-abc"},
        )
        == []
    )
    assert (
        credential_problems(
            "telegram", TelegramConfig(enabled=True), {"TELEGRAM_BOT_TOKEN": "123456:AAH-x_y"}
        )
        == []
    )
