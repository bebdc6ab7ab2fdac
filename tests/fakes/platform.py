"""FakeAdapter: a PlatformAdapter test double that records sends and injects failures.

It implements the router's seam (gateway.edge.ports.PlatformAdapter); the real SDK adapters
are tested against fake platform servers instead.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from gateway.edge.events import Attachment, ChatRef, MessageEvent, OutboundMessage, SendResult
from gateway.edge.ports import Capabilities, DownloadError, EventSink
from hermes.places import ChatType


@dataclass
class Sent:
    message: OutboundMessage
    at: float


@dataclass
class FakeAdapter:
    name: str = "fakechat"
    capabilities: Capabilities = field(default_factory=lambda: Capabilities(max_length=200))
    sent: list[Sent] = field(default_factory=list)
    attempts: list[OutboundMessage] = field(default_factory=list)
    failures: deque[SendResult] = field(default_factory=deque)
    typing_calls: int = 0
    files: dict[str, bytes] = field(default_factory=dict)  # Attachment.ref: data
    sink: EventSink | None = None

    async def start(self, sink: EventSink) -> None:
        self.sink = sink

    async def stop_intake(self) -> None:
        self.sink = None

    async def connection(self) -> str:
        return "connected"

    async def whoami(self) -> str:
        return self.name

    async def stop(self) -> None:
        self.sink = None

    async def send(self, message: OutboundMessage) -> SendResult:
        self.attempts.append(message)
        if self.failures:
            return self.failures.popleft()
        self.sent.append(Sent(message, time.monotonic()))
        return SendResult(True, (str(len(self.sent)),))

    async def edit(self, chat: ChatRef, message_id: str, message: OutboundMessage) -> SendResult:
        self.attempts.append(message)
        return SendResult(True, (message_id,))

    async def delete(self, chat: ChatRef, message_id: str) -> SendResult:
        return SendResult(True, (message_id,))

    async def direct_chat(self, platform_user_id: str) -> ChatRef | None:
        return ChatRef(platform_user_id, ChatType.DM)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        data = self.files.get(attachment.ref)
        if data is None:
            raise DownloadError("the fake platform has no such file")
        if len(data) > max_bytes:
            raise DownloadError.too_big(len(data), max_bytes)
        return data

    async def typing(self, chat: ChatRef) -> None:
        self.typing_calls += 1

    async def deliver(self, event: MessageEvent) -> None:
        assert self.sink is not None
        await self.sink(event)

    async def wait_for(self, count: int, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while len(self.sent) < count:
            assert time.monotonic() < deadline, f"only {len(self.sent)} of {count} sent"
            await asyncio.sleep(0.01)

    def texts(self) -> list[str]:
        return [s.message.text for s in self.sent]
