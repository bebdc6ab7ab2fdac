"""Shutdown during turns on Slack and Discord (Telegram's is a real-process SIGTERM test in
test_gateway_process.py): the whole Gateway, both fakes, a slow model."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from gateway.config import load_config
from gateway.runtime import Gateway
from hermes.state.db import SessionDB
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack


def test_stopping_during_turns_lets_them_finish_on_slack_and_discord(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack, discord_fake: FakeDiscord
) -> None:
    fake_llm.default = Reply(text="worth the wait", delay=1.5)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake_llm.base_url}\n  model: m\n  max_retries: 0\n"
        "access:\n  allow_all: true\n"
        "platforms:\n"
        f"  slack:\n    enabled: true\n    api_base: {slack.api_base}\n"
        f"  discord:\n    enabled: true\n    api_base: {discord_fake.api_base}\n"
        f"    gateway_url: {discord_fake.gateway_url}\n"
        "gateway:\n  http:\n    port: 0\n"
    )
    env = {"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_APP_TOKEN": "xapp-t", "DISCORD_BOT_TOKEN": "d"}

    async def go() -> float:
        db = SessionDB.open(home)
        gateway = Gateway(home, load_config(home), db, env)
        await gateway.start()
        try:
            await asyncio.to_thread(slack.wait_connected)
            await asyncio.to_thread(slack.message, "slow one on slack")
            await asyncio.to_thread(discord_fake.message, "slow one on discord")
            while len(fake_llm.requests) < 2:  # both turns are waiting for the model
                await asyncio.sleep(0.05)
        finally:
            started = time.monotonic()
            await gateway.stop()
            db.close()
        return time.monotonic() - started

    took = asyncio.run(go())
    # one message each, showing the whole reply (it was streamed into it)
    assert len(slack.posted()) == 1 and list(slack.messages.values()) == ["worth the wait"]
    assert len(discord_fake.posted) == 1
    assert list(discord_fake.messages.values()) == ["worth the wait"]
    assert took < 15  # the turns finished; nothing waited out the 20 s grace
