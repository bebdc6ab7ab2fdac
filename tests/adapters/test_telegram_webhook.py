"""Telegram webhook mode through the gateway's HTTP server, and the health endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from adapters.telegram.adapter import TelegramAdapter, Webhook
from gateway.edge.http_server import HttpServer
from tests.adapters.harness import run_gateway
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram

SECRET = "s3cret-token"


def update(text: str, update_id: int) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "text": text,
            "chat": {"id": 42, "type": "private", "first_name": "A"},
            "from": {"id": 42, "is_bot": False, "first_name": "A"},
        },
    }


def test_webhook_checks_the_secret_and_answers(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    fake_llm.default = Reply(text="pushed and answered")
    adapter = TelegramAdapter(
        "1:HOOK", base_url=telegram.base_url, webhook=Webhook("https://bot.example.org", SECRET)
    )
    http = HttpServer("127.0.0.1", 0, lambda: {"telegram": "connected"})
    for route in adapter.routes():
        http.add(route)

    async def body() -> list[int]:
        statuses = []
        base = f"http://127.0.0.1:{http.port}"
        async with aiohttp.ClientSession() as client:
            for headers, payload in (
                ({"X-Telegram-Bot-Api-Secret-Token": "wrong"}, json.dumps(update("sneaky", 1))),
                ({"X-Telegram-Bot-Api-Secret-Token": SECRET}, "not json"),
                (
                    {"X-Telegram-Bot-Api-Secret-Token": SECRET},
                    json.dumps(update("hello via webhook", 2)),
                ),
            ):
                async with client.post(
                    f"{base}/telegram/webhook",
                    data=payload,
                    headers={"Content-Type": "application/json", **headers},
                ) as r:
                    statuses.append(r.status)
            async with client.get(f"{base}/healthz") as r:
                statuses.append(r.status)
                assert (await r.json())["platforms"] == {"telegram": "connected"}
        deadline = time.monotonic() + 20
        while telegram.shown(42) != ["pushed and answered"]:  # streamed: edited to the end
            assert time.monotonic() < deadline, telegram.shown(42)
            await asyncio.sleep(0.05)
        return statuses

    async def with_server() -> list[int]:
        await http.start()
        try:
            return await body()
        finally:
            await http.stop()

    statuses = run_gateway(home, fake_llm, lambda _menu: adapter, with_server)
    assert statuses == [403, 400, 200, 200]
    hook = telegram.sent("setWebhook")[0]
    assert (
        hook["url"] == "https://bot.example.org/telegram/webhook" and hook["secret_token"] == SECRET
    )
    assert len(telegram.sent()) == 1  # one message (edited while the reply streamed)
    assert not telegram.sent("getUpdates")  # no polling in webhook mode
    assert len(fake_llm.requests) == 1
