"""A started platform's connection, watched by the gateway: while the SDK reconnects by
itself the state says so (and /readyz is not ready); when the SDK gives up, the gateway
restarts the platform with backoff. The whole Gateway, in process, against the fakes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway.config import load_config
from gateway.runtime import Gateway
from hermes.state.db import SessionDB
from hermes.state.schema import SCHEMA_VERSION
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack, SlackFault
from tests.fakes.telegram_server import FakeTelegram, Fault
from tests.harness import wait

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"


def configure(home: Path, llm: FakeOpenAI, platform: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {llm.base_url}\n  model: m\n  max_retries: 0\n"
        f"access:\n  allow_all: true\nplatforms:\n{platform}gateway:\n  http:\n    port: 0\n"
    )


async def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    await wait.until(check, f"never: {what}", timeout)


@contextlib.asynccontextmanager
async def started(home: Path, env: dict[str, str]) -> AsyncIterator[Gateway]:
    """The whole Gateway, in process, started with `env` as its environment; stopped."""
    db = SessionDB.open(home)
    gateway = Gateway(home, load_config(home), db, env)
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.stop()
        db.close()


@pytest.mark.slow
def test_telegram_polling_trouble_shows_then_clears_and_a_refused_token_restarts_it(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    configure(
        home,
        fake_llm,
        f"  telegram:\n    enabled: true\n    base_url: {telegram.base_url}\n",
    )

    async def go() -> None:
        async with started(home, {"TELEGRAM_BOT_TOKEN": TOKEN}) as gateway:
            assert gateway.status() == {"telegram": "connected"}
            telegram.faults.extend(Fault("getUpdates", 502, "Bad Gateway") for _ in range(3))
            await until(
                lambda: gateway.status()["telegram"].startswith("reconnecting"), 20, "trouble"
            )
            # the reason, as the transport saw it (one source: the SDK's error adds none)
            shown = gateway.status()["telegram"]
            assert "getUpdates answered HTTP 502" in shown, shown
            assert not gateway.readiness()["platform telegram"]
            await until(lambda: gateway.status()["telegram"] == "connected", 40, "recovered")
            assert gateway.readiness()["platform telegram"]

            getmes = sum(1 for method, _ in telegram.calls if method == "getMe")
            telegram.faults.append(Fault("getUpdates", 401, "Unauthorized"))
            await until(lambda: "failed" in gateway.status()["telegram"], 20, "lost")
            await until(lambda: gateway.status()["telegram"] == "connected", 30, "restarted")
            restarted = sum(1 for method, _ in telegram.calls if method == "getMe")
            assert restarted > getmes
            # the token is accepted again: a fresh adapter, connected for good (the refused
            # one, started again, said "lost" at every check and was restarted forever)
            checks = gateway.checks
            await until(lambda: gateway.checks >= checks + 3, 20, "three more checks")
            assert gateway.status()["telegram"] == "connected"
            assert sum(1 for method, _ in telegram.calls if method == "getMe") == restarted
            telegram.user_message("still there?", user_id=42)
            await asyncio.to_thread(telegram.wait_sent, 1)

    asyncio.run(go())


@pytest.mark.slow
def test_discord_resumes_by_itself_and_is_restarted_when_it_gives_up(
    home: Path, fake_llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    configure(
        home,
        fake_llm,
        f"  discord:\n    enabled: true\n    api_base: {discord_fake.api_base}\n"
        f"    gateway_url: {discord_fake.gateway_url}\n",
    )

    async def go() -> None:
        async with started(home, {"DISCORD_BOT_TOKEN": "d"}) as gateway:
            first = gateway.adapters["discord"]
            await asyncio.to_thread(discord_fake.drop_connections)  # resumable
            await asyncio.to_thread(discord_fake.wait_ready, 2)
            after = gateway.checks + 1  # a whole round of checks begun after the resume
            await until(lambda: gateway.checks > after, 20, "no connection check ran")
            assert gateway.adapters["discord"] is first  # the SDK handled it
            assert gateway.status() == {"discord": "connected"}

            await asyncio.to_thread(discord_fake.drop_connections, 4004)  # it gives up
            await until(lambda: "failed" in gateway.status()["discord"], 20, "lost")
            assert "4004" in gateway.status()["discord"]
            await until(lambda: gateway.status()["discord"] == "connected", 30, "restarted")
            assert gateway.adapters["discord"] is not first
            await asyncio.to_thread(discord_fake.message, "are you back?")
            await until(lambda: bool(discord_fake.posted), 20, "answered")

    asyncio.run(go())


def test_slack_socket_mode_that_failed_to_start_is_retried_as_a_new_adapter(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    """Slack answers 500 to the first auth.test (an outage at boot): the retry starts a
    new adapter (the failed one's Socket Mode client was closed by its stop), which
    connects once and answers."""
    configure(
        home,
        fake_llm,
        f"  slack:\n    enabled: true\n    mode: socket\n    api_base: {slack.api_base}\n",
    )
    slack.faults.append(SlackFault("auth.test", status=500, error="internal_error"))
    env = {"SLACK_BOT_TOKEN": "xoxb-1-abc", "SLACK_APP_TOKEN": "xapp-1-abc"}

    async def go() -> None:
        async with started(home, env) as gateway:
            assert "failed" in gateway.status()["slack"]
            await until(lambda: gateway.status()["slack"] == "connected", 30, "retried")
            await asyncio.to_thread(slack.wait_connected, 1)
            await asyncio.to_thread(slack.message, "are you there?")
            await until(lambda: bool(slack.posted()), 20, "answered")
            assert slack.connections == 1

    asyncio.run(go())


def test_telegram_webhook_that_failed_to_start_is_started_again_and_answers(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    """Webhook mode: the server holds the adapter's route, so the retry starts the same
    adapter again (initialize, setWebhook); a push is then answered, once."""
    with socket.socket() as probe:  # the gateway's port, known before it starts
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configure(
        home,
        fake_llm,
        f"  telegram:\n    enabled: true\n    base_url: {telegram.base_url}\n"
        f"    mode: webhook\n    webhook_url: http://127.0.0.1:{port}\n",
    )
    config = home / "config.yaml"
    config.write_text(config.read_text().replace("port: 0", f"port: {port}"))
    telegram.faults.append(Fault("getMe", 502, "Bad Gateway"))
    env = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_WEBHOOK_SECRET": "hook-secret-123"}
    fake_llm.default = Reply(text="here")

    async def go() -> None:
        async with started(home, env) as gateway:
            assert "failed" in gateway.status()["telegram"]
            await until(lambda: gateway.status()["telegram"] == "connected", 30, "retried")
            telegram.user_message("anyone home?", user_id=42)
            await asyncio.to_thread(telegram.wait_sent, 1)

            def shown() -> str:  # a loaded machine streams a draft first, then edits it
                return str((telegram.sent("editMessageText") or telegram.sent())[-1]["text"])

            await until(lambda: shown() == "here", 20, "the reply shown whole")
            assert len(telegram.sent()) == 1  # answered once

    asyncio.run(go())


def test_starting_says_nothing_an_operator_cannot_act_on(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """discord.py's missing-voice warnings and slack-bolt's token note are dropped;
    fresh state.db creation is one line, not one per migration."""
    from adapters.discord.adapter import DiscordAdapter
    from adapters.slack.adapter import SlackAdapter

    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1-abc")  # bolt reads it by itself
    caplog.set_level(logging.INFO)

    async def build() -> None:
        for adapter in (DiscordAdapter("token"), SlackAdapter("xoxb-1-abc", "xapp-1-abc")):
            await adapter.stop()

    asyncio.run(build())
    SessionDB.open(tmp_path / "home").close()
    said = [record.getMessage() for record in caplog.records]
    assert not [line for line in said if "voice will NOT be supported" in line]
    assert not [line for line in said if "will be unused" in line]
    created = f"state.db created (schema version {SCHEMA_VERSION})"
    assert [line for line in said if "state.db" in line] == [created]
