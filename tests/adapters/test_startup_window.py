"""An event that arrives while its adapter is still starting is answered, not lost:
the gateway attaches each adapter to the router before starting it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from gateway.config import load_config
from gateway.runtime import Gateway
from hermes.state.db import SessionDB
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply


def test_a_discord_message_during_command_sync_is_answered(
    home: Path, fake_llm: FakeOpenAI, discord_fake: FakeDiscord
) -> None:
    fake_llm.default = Reply(text="hello early bird")
    discord_fake.sync_delay = 1.5  # the app-command PUT after connecting is slow
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake_llm.base_url}\n  model: m\n  max_retries: 0\n"
        "memory:\n  review_interval: 0\naccess:\n  allow_all: true\n"
        "platforms:\n  discord:\n    enabled: true\n    token_env: DISCORD_TOKEN\n"
        f"    api_base: {discord_fake.api_base}\n    gateway_url: {discord_fake.gateway_url}\n"
        "gateway:\n  http:\n    port: 0\n"
    )

    async def go() -> list[str]:
        db = SessionDB.open(home)
        gateway = Gateway(home, load_config(home), db, {"DISCORD_TOKEN": "bot-token"})
        starting = asyncio.create_task(gateway.start())
        await asyncio.to_thread(discord_fake.sync_started.wait, 20)
        assert not starting.done()  # still inside DiscordAdapter.start()
        await asyncio.to_thread(discord_fake.message, "am I too early?")
        await starting
        deadline = time.monotonic() + 20
        while not discord_fake.posted:
            assert time.monotonic() < deadline, "the early message was never answered"
            await asyncio.sleep(0.05)
        await gateway.stop()
        db.close()
        return [str(p["content"]) for p in discord_fake.posted]

    assert asyncio.run(go()) == ["hello early bird"]
