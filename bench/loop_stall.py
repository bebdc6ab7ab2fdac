"""The event loop while another writer holds the lock: does the gateway stay responsive?

    .venv/bin/python bench/loop_stall.py [--hold 3] [--postgres] [--json]

The app from the composition root (a fake platform, an in-process model that streams its
reply over 4 s) and the gateway's HTTP server in one process. Chat B's reply is being
streamed when another writer takes the lock for `--hold` seconds (SQLite: BEGIN
IMMEDIATE on its own connection; PostgreSQL, where a message is appended without the
writers' lock: the row of chat A's session FOR UPDATE), and chat A writes: its turn must
wait for the lock. Meanwhile /healthz is asked every 20 ms. Reported: the worst and the
median /healthz latency during the hold, the event loop's worst lag (gateway/loopwatch.py),
the longest gap between chat B's stream edits during the hold, and when chat A's reply
came (after the hold: it had to wait). `--postgres` runs on a scratch database of the
server the tests use (HERMES_TEST_POSTGRES_URL, default postgresql://postgres@127.0.0.1/postgres).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.app import build_app
from gateway.config import HermesConfig
from gateway.edge.events import ChatRef, MessageEvent, OutboundMessage, UserRef
from gateway.edge.http_server import HttpServer
from gateway.edge.ports import Capabilities, SendResult
from gateway.loopwatch import LoopWatch
from hermes.llm.types import ModelReply
from hermes.places import ChatType
from hermes.state.db import SessionDB
from tests.fakes.platform import FakeAdapter
from tests.harness.locks import hold_the_lock

STREAM_S = 4.0


class SlowStreamingModel:
    """Streams chat B's reply in 40 pieces over STREAM_S; answers chat A at once."""

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        last = str(messages[-1]["content"])
        if "stream" in last and on_text is not None:
            for n in range(40):
                on_text(f"piece {n} ")
                await asyncio.sleep(STREAM_S / 40)
            return ModelReply(" ".join(f"piece {n}" for n in range(40)))
        return ModelReply("Noted.")


class EditingAdapter(FakeAdapter):
    """The fake platform, able to edit (so replies stream), each edit's time kept."""

    def __init__(self) -> None:
        super().__init__(capabilities=Capabilities(max_length=4000, edit_interval_s=0.05))
        self.edits: list[float] = []

    async def edit(self, chat: ChatRef, message_id: str, message: OutboundMessage) -> SendResult:
        self.edits.append(time.monotonic())
        return await super().edit(chat, message_id, message)


def message(user: str, text: str, n: int) -> MessageEvent:
    return MessageEvent(
        "fakechat",
        f"e{user}{n}",
        f"m{user}{n}",
        ChatRef(user, ChatType.DM),
        UserRef(user, user),
        text,
    )


async def reply_after(adapter: FakeAdapter, started: float) -> float:
    """When chat A's reply came (it waits for the lock)."""
    while True:
        late = [s.at for s in adapter.sent if s.message.text == "Noted." and s.at >= started]
        if late:
            return late[0]
        await asyncio.sleep(0.01)


async def ask_health(port: int, until: float) -> list[float]:
    """/healthz asked every 20 ms until `until`: each answer's latency."""
    latencies: list[float] = []
    async with aiohttp.ClientSession() as client:
        while time.monotonic() < until:
            asked = time.monotonic()
            async with client.get(f"http://127.0.0.1:{port}/healthz") as answer:
                await answer.read()
            latencies.append(time.monotonic() - asked)
            await asyncio.sleep(0.02)
    return latencies


async def measure(home: Path, url: str | None, hold_s: float) -> dict[str, Any]:
    db = SessionDB.open(home, url)
    config = HermesConfig.model_validate(
        {"memory": {"review_interval": 0}, "access": {"allow_all": True}}
    )
    app = build_app(home, config, db, model=SlowStreamingModel())
    adapter = EditingAdapter()
    app.router.attach(adapter)
    await adapter.start(app.router.handle)
    http = HttpServer("127.0.0.1", 0, lambda: {"fakechat": "connected"})
    await http.start()
    watch = LoopWatch()
    watching = asyncio.create_task(watch.run())
    held, release = threading.Event(), threading.Event()
    holder: threading.Thread | None = None
    try:
        for user in ("a", "b"):  # both known, each with an open session
            await adapter.deliver(message(user, "hello", 0))
        await adapter.wait_for(2)
        alice = db.people.user_for_identity("fakechat", "a")
        (session,) = db.conversations.list_sessions(alice)
        await adapter.deliver(message("b", "please stream a long answer", 1))
        while len(adapter.edits) < 3:  # chat B's reply is streaming
            await asyncio.sleep(0.01)
        holder = threading.Thread(
            target=hold_the_lock, args=(db.path, url, session.id, held, release), daemon=True
        )
        holder.start()
        await asyncio.to_thread(held.wait, 10)
        started = time.monotonic()
        watch.worst = 0.0
        await adapter.deliver(message("a", "and now?", 1))
        latencies = await ask_health(http.port, started + hold_s)
        edits = [at for at in adapter.edits if at >= started]
        gaps = [b - a for a, b in zip([started, *edits], edits, strict=False)]
        worst_lag = watch.worst
        replied_before_release = sum(
            1 for s in adapter.sent if s.message.text == "Noted." and s.at >= started
        )
        release.set()
        answered = await reply_after(adapter, started)
    finally:
        release.set()
        watching.cancel()
        await app.router.stop()
        await app.close()
        await http.stop()
        if holder is not None:
            holder.join(10)
        db.close()
    return {
        "backend": "postgresql" if url else "sqlite",
        "hold_s": hold_s,
        "healthz_worst_ms": round(max(latencies) * 1000, 1),
        "healthz_median_ms": round(statistics.median(latencies) * 1000, 1),
        "healthz_asked": len(latencies),
        "loop_worst_lag_ms": round(worst_lag * 1000, 1),
        "stream_edits_during_hold": len(edits),
        "stream_longest_gap_ms": round(max(gaps, default=0.0) * 1000, 1),
        "a_replied_during_hold": replied_before_release,
        "a_replied_after_s": round(answered - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold", type=float, default=3.0)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.postgres:
            from tests.harness.postgres import start_test_server

            server = start_test_server()
            try:
                _, url = server.schema()
                result = asyncio.run(measure(Path(tmp), url, args.hold))
            finally:
                server.drop()
        else:
            result = asyncio.run(measure(Path(tmp), None, args.hold))
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:28} {value}")


if __name__ == "__main__":
    main()
