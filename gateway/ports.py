"""The seam between the router and a platform: a few methods and a capability sheet."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gateway.events import ChatRef, MessageEvent, OutboundMessage, SendResult

EventSink = Callable[[MessageEvent], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Capabilities:
    max_length: int
    length: Callable[[str], int] = field(default=len)  # how the platform counts
    # the text as it will be sent (the platform's dialect): what `max_length` limits
    render: Callable[[str], str] = field(default=str)
    # the SDK may hand over one chat's messages out of order (slack-bolt dispatches each
    # delivery concurrently): a lane waits this long before its first turn, so messages
    # sent just before can still take their place in line
    reorder_window_s: float = 0.0


@dataclass(frozen=True, slots=True)
class MenuEntry:
    """One command in a platform's command menu (generated from the command table)."""

    name: str  # without the slash
    summary: str
    takes_text: bool = False  # has an argument (a Discord option, free text)


class PlatformAdapter(Protocol):
    name: str
    capabilities: Capabilities

    async def start(self, sink: EventSink) -> None:
        """Connect and push every incoming message into `sink` (which returns fast)."""

    async def stop_intake(self) -> None:
        """Stop receiving (shutdown begins) while sending still works. Whatever is not
        received yet must stay with the platform, to be delivered to the next run."""

    async def stop(self) -> None: ...

    async def whoami(self) -> str:
        """One identity call with the credentials, without connecting (getMe, auth.test,
        users/@me): who the bot is. Raises what the SDK raises when they are refused."""

    async def connection(self) -> str:
        """How the platform connection is, once started: 'connected'; 'reconnecting: why'
        while the SDK retries by itself (with its own backoff); 'lost: why' when the SDK
        has given up (the gateway then restarts the platform, with backoff)."""

    async def send(self, message: OutboundMessage) -> SendResult: ...

    async def typing(self, chat: ChatRef) -> None:
        """Show a typing indicator (best effort)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """The router's reply to one line of a local chat."""

    text: str
    failed: bool = False  # the text explains a failure (the model could not answer)


@runtime_checkable
class LocalChat(PlatformAdapter, Protocol):
    """A chat surface inside this process (the terminal): a line in, its answer out."""

    def event(self, text: str) -> MessageEvent:
        """`text` as a message event from the local owner."""

    async def ask(self, text: str) -> Answer:
        """Send one line through the router; its reply. Cancelling sends /stop."""
