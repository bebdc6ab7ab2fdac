"""Gateway throughput: the Telegram fake, the real adapter and router, an instant model.

    .venv/bin/python bench/gateway_throughput.py [--chats 200] [--messages 20] [--json]
        [--streaming SECONDS]

The Bot API fake and the simulated users run in a child process. Each of `--chats` users
sends `--messages` messages; each next message is sent when the
previous reply arrived (a person waiting for the answer), all chats at once. Latency is
from the update being offered to the Bot API fake until the reply reaches it: polling,
python-telegram-bot, the router, the agent turn (SQLite persistence included) and the
send. The model answers instantly in-process, so what is measured is the gateway; peak
RSS is the gateway process's. Streaming is off (gateway.streaming: off).

`--streaming SECONDS` switches it on and has the model write each reply in 12 pieces over
SECONDS: a reply is done when a message shows it without the cursor; the report adds the
edits made, the most edits any chat saw within one second, and the time to the first
visible text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.telegram.adapter import TelegramAdapter
from gateway.app import build_app
from gateway.config import HermesConfig
from gateway.pipeline.streaming import CURSOR
from hermes.llm.types import ModelReply
from hermes.state.db import SessionDB
from tests.fakes.telegram_server import FakeTelegram

REPLY = "Got it, thanks! Here is a longer answer, written a few words at a time as models do."


class InstantModel:
    def __init__(self, stream_seconds: float = 0.0) -> None:
        self.stream_seconds = stream_seconds

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        temperature: float | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        if on_text is not None and self.stream_seconds:
            words = REPLY.split(" ")
            for piece in range(1, 13):
                await asyncio.sleep(self.stream_seconds / 12)
                on_text(" ".join(words[: round(len(words) * piece / 12)]))
            return ModelReply(REPLY, prompt_tokens=50 * len(messages), completion_tokens=20)
        return ModelReply("Got it, thanks!", prompt_tokens=50 * len(messages), completion_tokens=4)


class Driver:
    """Plays the users: the next message of a chat goes out when its reply came back."""

    def __init__(self, tg: FakeTelegram, chats: int, messages: int) -> None:
        self.tg, self.chats, self.messages = tg, chats, messages
        self.sent_at: dict[int, float] = {}
        self.latencies: list[float] = []
        self.count: dict[int, int] = dict.fromkeys(range(chats), 0)
        self.done = threading.Event()
        self._seen = 0
        self.first_text: list[float] = []  # a reply's first visible text, after the message
        self.edits: dict[int, list[float]] = {}
        self._waiting_first: set[int] = set()

    def send(self, chat: int) -> None:
        self.sent_at[chat] = time.perf_counter()
        self._waiting_first.add(chat)
        self.tg.user_message(f"message {self.count[chat]} from chat {chat}", user_id=10_000 + chat)

    def watch(self) -> None:
        replies = 0
        while not self.done.is_set():
            calls = self.tg.calls[self._seen :]  # only what is new since the last look
            self._seen += len(calls)
            for method, params in calls:
                if method not in ("sendMessage", "editMessageText"):
                    continue
                chat = int(params["chat_id"]) - 10_000
                now = time.perf_counter()
                if method == "editMessageText":
                    self.edits.setdefault(chat, []).append(now)
                if chat in self._waiting_first:
                    self._waiting_first.discard(chat)
                    self.first_text.append(now - self.sent_at[chat])
                if str(params.get("text", "")).endswith(CURSOR):
                    continue  # still being written
                self.latencies.append(now - self.sent_at[chat])
                self.count[chat] += 1
                replies += 1
                if self.count[chat] < self.messages:
                    self.send(chat)
            if replies >= self.chats * self.messages:
                self.done.set()
            time.sleep(0.002)


def platform_side(chats: int, messages: int) -> None:
    """The child process: the Bot API fake and the users, reporting latencies as JSON."""
    tg = FakeTelegram().start()
    print(tg.base_url, flush=True)
    sys.stdin.readline()  # the gateway is up
    driver = Driver(tg, chats, messages)
    watcher = threading.Thread(target=driver.watch, daemon=True)
    started = time.perf_counter()
    watcher.start()
    for chat in range(chats):
        driver.send(chat)
    driver.done.wait()
    elapsed = time.perf_counter() - started
    busiest = max((_most_in_a_second(times) for times in driver.edits.values()), default=0)
    report = {
        "seconds": elapsed,
        "latencies": driver.latencies,
        "first_text": driver.first_text,
        "edits": sum(len(times) for times in driver.edits.values()),
        "most_edits_in_1s": busiest,
    }
    print(json.dumps(report), flush=True)
    sys.stdin.readline()
    tg.stop()


def _most_in_a_second(times: list[float]) -> int:
    """The most of `times` (sorted) within any one-second window."""
    most, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


async def run(chats: int, messages: int, stream_seconds: float = 0.0) -> dict[str, Any]:
    # the platform lives in its own process, as Telegram does: it must not share our GIL
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--platform-side",
        "--chats",
        str(chats),
        "--messages",
        str(messages),
        limit=2**26,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    base_url = (await child.stdout.readline()).decode().strip()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        db = SessionDB.open(home)
        config = HermesConfig.model_validate(
            {
                "access": {"allow_all": True},
                "memory": {"review_interval": 0},
                "gateway": {"streaming": stream_seconds > 0},
            }
        )
        app = build_app(home, config, db, model=InstantModel(stream_seconds))
        adapter = TelegramAdapter(
            "1:BENCH", base_url=base_url, poll_timeout=1, menu=app.commands.menu()
        )
        app.router.attach(adapter)
        await adapter.start(app.router.handle)
        child.stdin.write(b"go\n")
        await child.stdin.drain()
        result = json.loads(await child.stdout.readline())
        await adapter.stop()
        await app.router.stop()
        await app.close()
        db.close()
    child.stdin.write(b"done\n")
    await child.stdin.drain()
    await child.wait()
    cuts = statistics.quantiles(result["latencies"], n=100, method="inclusive")
    report = {
        "chats": chats,
        "messages": chats * messages,
        "seconds": round(result["seconds"], 2),
        "messages_per_second": round(chats * messages / result["seconds"], 1),
        "p50_ms": round(cuts[49] * 1000, 1),
        "p99_ms": round(cuts[98] * 1000, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    if stream_seconds:
        first = statistics.quantiles(result["first_text"], n=100, method="inclusive")
        report |= {
            "first_text_p50_ms": round(first[49] * 1000, 1),
            "edits": result["edits"],
            "edits_per_reply": round(result["edits"] / (chats * messages), 2),
            "edits_per_second": round(result["edits"] / result["seconds"], 1),
            "most_edits_in_1s_one_chat": result["most_edits_in_1s"],
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--streaming", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--platform-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.platform_side:
        platform_side(args.chats, args.messages)
        return
    report = asyncio.run(run(args.chats, args.messages, args.streaming))
    if args.json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        print(f"{key:22} {value}")


if __name__ == "__main__":
    main()
