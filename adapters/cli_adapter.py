"""The terminal as a platform: `hermes chat` talks to the router like any other adapter.

The chat loop (gateway/cli/chat_cmd.py) reads a line and awaits `ask(text)`, which
pushes it into the router's sink as a message from the local owner and resolves with
the reply the router sends back for it. Cancelling `ask` (Ctrl-C) sends `/stop`, which
cancels the running turn in the router; the message itself is already saved.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time

from gateway.events import (
    ChatRef,
    ChatType,
    MessageEvent,
    OutboundMessage,
    SendResult,
    UserRef,
)
from gateway.ports import Answer, Capabilities, EventSink

CLI_CHAT = ChatRef("local", ChatType.DM)
CLI_USER = UserRef("local", "owner")


class CliAdapter:
    name = "cli"
    # the terminal renders the Markdown itself and has no length limit worth chunking at
    capabilities = Capabilities(max_length=sys.maxsize)  # a terminal shows it all, unsplit

    def __init__(self) -> None:
        self._sink: EventSink | None = None
        self._waiting: dict[str, asyncio.Future[Answer]] = {}
        self._ids = itertools.count()
        self._run = time.time_ns()  # message ids stay unique across runs (state.db dedupes)

    def event(self, text: str) -> MessageEvent:
        message_id = f"{self._run}-{next(self._ids)}"
        return MessageEvent(
            platform=self.name,
            event_id=message_id,
            message_id=message_id,
            chat=CLI_CHAT,
            user=CLI_USER,
            text=text,
            sent_at=time.time(),
        )

    async def start(self, sink: EventSink) -> None:
        self._sink = sink

    async def stop_intake(self) -> None:
        self._sink = None

    async def connection(self) -> str:
        return "connected"  # in-process

    async def whoami(self) -> str:
        return "the terminal"

    async def stop(self) -> None:
        self._sink = None
        for future in self._waiting.values():
            future.cancel()

    async def ask(self, text: str) -> Answer:
        """Send one line; the router's reply to it."""
        if self._sink is None:
            raise RuntimeError("the CLI adapter is not started")
        event = self.event(text)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting[event.message_id] = future
        try:
            await self._sink(event)
            return await future
        except asyncio.CancelledError:
            if self._sink is not None:
                await self._sink(self.event("/stop"))
            raise
        finally:
            self._waiting.pop(event.message_id, None)

    async def send(self, message: OutboundMessage) -> SendResult:
        future = self._waiting.get(message.reply_to_id or "")
        if future is not None and not future.done():
            future.set_result(Answer(message.text, message.failed))
        return SendResult(True, (message.reply_to_id or "",))

    async def typing(self, chat: ChatRef) -> None:
        """The chat loop shows its own spinner."""
