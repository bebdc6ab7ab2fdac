"""Slack's HTTP Events API through the gateway's HTTP server: signatures, retries."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from adapters.slack.adapter import SlackAdapter
from gateway.edge.http_server import HttpServer
from tests.adapters.harness import run_gateway
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack

SECRET = "signing-secret"


def signed(body: str, secret: str = SECRET, retry: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest}",
    }
    if retry is not None:
        headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
    return headers


def stamp() -> str:
    """A message's ts as Slack makes it: the time it was sent (one made long ago would
    be answered as late)."""
    time.sleep(0.000_002)
    return f"{time.time():.6f}"


def event_body(text: str, ts: str) -> str:
    event: dict[str, Any] = {
        "type": "message",
        "channel": "D7",
        "channel_type": "im",
        "user": "U7",
        "text": text,
        "ts": ts,
        "event_ts": ts,
    }
    return json.dumps(
        {
            "token": "t",
            "team_id": "T1",
            "api_app_id": "A1",
            "type": "event_callback",
            "event": event,
            "event_id": f"Ev{ts}",
            "event_time": int(time.time()),
        }
    )


def test_signed_events_are_answered_and_forgeries_refused(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack
) -> None:
    fake_llm.default = Reply(text="hello over http")
    adapter = SlackAdapter("xoxb-test", api_base=slack.api_base, signing_secret=SECRET)
    http = HttpServer("127.0.0.1", 0, lambda: {"slack": "connected"})
    for route in adapter.routes():
        http.add(route)

    async def body() -> list[Any]:
        url = f"http://127.0.0.1:{http.port}/slack/events"
        results: list[Any] = []
        async with aiohttp.ClientSession() as client:
            challenge = json.dumps(
                {"type": "url_verification", "challenge": "abc123", "token": "t"}
            )
            async with client.post(url, data=challenge, headers=signed(challenge)) as r:
                results.append((r.status, await r.text()))
            forged = event_body("forged", stamp())
            async with client.post(url, data=forged, headers=signed(forged, "wrong")) as r:
                results.append(r.status)
            real = event_body("hi via http", stamp())
            async with client.post(url, data=real, headers=signed(real)) as r:
                results.append(r.status)
            async with client.post(url, data=real, headers=signed(real, retry=1)) as r:
                results.append(r.status)  # Slack's retry of the same event: acked, not answered
        deadline = time.monotonic() + 20
        while not slack.posted():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        return results

    async def with_server() -> list[Any]:
        await http.start()
        try:
            return await body()
        finally:
            await http.stop()

    results = run_gateway(home, fake_llm, lambda _menu: adapter, with_server)
    assert results[0][0] == 200 and "abc123" in results[0][1]
    assert results[1:] == [401, 200, 200]
    assert [p["text"] for p in slack.posted()] == ["hello over http"]
    assert len(fake_llm.requests) == 1


def test_an_event_that_arrives_before_the_adapter_has_started_is_retried_not_lost(
    slack: FakeSlack,
) -> None:
    """The gateway's server listens before each platform has started (auth.test takes a
    moment): an event in that window gets 503 and Retry-After, so Slack sends it again,
    never 404 (which Slack takes as a final answer, and the event is lost)."""
    adapter = SlackAdapter("xoxb-test", api_base=slack.api_base, signing_secret=SECRET)
    http = HttpServer("127.0.0.1", 0, lambda: {"slack": "starting"})
    for route in adapter.routes():
        http.add(route)

    async def early() -> tuple[int, str | None]:
        await http.start()
        try:
            real = event_body("hi before start", stamp())
            async with (
                aiohttp.ClientSession() as client,
                client.post(
                    f"http://127.0.0.1:{http.port}/slack/events", data=real, headers=signed(real)
                ) as r,
            ):
                return r.status, r.headers.get("Retry-After")
        finally:
            await http.stop()

    assert asyncio.run(early()) == (503, "1")


def test_malformed_requests_are_refused_without_a_traceback(
    home: Path, fake_llm: FakeOpenAI, slack: FakeSlack, caplog: Any
) -> None:
    """Anyone can send these: a timestamp that is not a number (or missing), and, signed,
    a body that is not a JSON object. Each is refused (4xx), nothing is logged with a
    traceback, and a real event still goes through after them."""
    adapter = SlackAdapter("xoxb-test", api_base=slack.api_base, signing_secret=SECRET)
    http = HttpServer("127.0.0.1", 0, lambda: {"slack": "connected"})
    for route in adapter.routes():
        http.add(route)
    fake_llm.default = Reply(text="still answering")

    async def body() -> list[int]:
        url = f"http://127.0.0.1:{http.port}/slack/events"
        statuses = []
        real = event_body("hi", stamp())
        async with aiohttp.ClientSession() as client:
            for odd_time in ("soon", "", "１２３", "1e9", "-5"):
                headers = signed(real) | {"X-Slack-Request-Timestamp": odd_time}
                async with client.post(url, data=real, headers=headers) as r:
                    statuses.append(r.status)
            for odd in ("[1, 2]", '"text"', "{not json", "null"):
                async with client.post(url, data=odd, headers=signed(odd)) as r:
                    statuses.append(r.status)
            async with client.post(url, data=real, headers=signed(real)) as r:
                statuses.append(r.status)
        deadline = time.monotonic() + 20
        while not slack.posted():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        return statuses

    async def with_server() -> list[int]:
        await http.start()
        try:
            return await body()
        finally:
            await http.stop()

    statuses = run_gateway(home, fake_llm, lambda _menu: adapter, with_server)
    assert all(400 <= s < 500 for s in statuses[:-1]), statuses
    assert statuses[-1] == 200
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
