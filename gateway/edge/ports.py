"""The seam between the router and a platform: a few methods and a capability sheet."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol, runtime_checkable

from gateway.edge.events import (
    Attachment,
    ChatRef,
    MessageEvent,
    OutboundFile,
    OutboundMessage,
    SendResult,
)

EventSink = Callable[[MessageEvent], Awaitable[None]]


class DownloadError(Exception):
    """A file that could not be fetched; the message says why, in words for the person."""

    @classmethod
    def too_big(cls, size: int, limit: int) -> DownloadError:
        return cls(
            f"That file is {size / 1e6:.1f} MB; I can take files up to {limit / 1e6:.0f} MB."
        )


async def bounded(pieces: AsyncIterator[bytes], max_bytes: int) -> bytes:
    """A download's bytes, read piece by piece and stopped as soon as they pass
    `max_bytes` (DownloadError.too_big): a platform's size can be missing or wrong."""
    data = bytearray()
    async for piece in pieces:
        data += piece
        if len(data) > max_bytes:
            raise DownloadError.too_big(len(data), max_bytes)
    return bytes(data)


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
    # streamed replies: a sent message may be edited at most this often in one chat
    # (None: the platform cannot edit messages, replies arrive whole)
    edit_interval_s: float | None = None
    group_edit_interval_s: float | None = None  # in groups and channels (stricter limits)
    buttons: bool = True  # shows buttons under a message (the terminal does not)
    # the largest file the bot may upload (bytes), for an adapter that `SendsFiles`
    max_file_bytes: int = 0

    def edit_interval(self, group: bool) -> float | None:
        if self.edit_interval_s is None:
            return None
        return (
            (self.group_edit_interval_s or self.edit_interval_s) if group else self.edit_interval_s
        )


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

    async def edit(self, chat: ChatRef, message_id: str, message: OutboundMessage) -> SendResult:
        """Replace the text of a message this adapter sent (`message_id` as `send` gave
        it). Editing to the text it already has is success. Only called when
        `capabilities.edit_interval_s` is set."""

    async def delete(self, chat: ChatRef, message_id: str) -> SendResult:
        """Delete a message this adapter sent (a streamed reply that came out shorter)."""

    async def typing(self, chat: ChatRef) -> None:
        """Show a typing indicator (best effort)."""

    async def direct_chat(self, platform_user_id: str) -> ChatRef | None:
        """The direct-message chat with this platform user (opened when needed), or None
        when the platform cannot reach them."""

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file's bytes; DownloadError when it is larger than `max_bytes` (checked
        before downloading when the platform gives the size) or cannot be fetched."""


@dataclass(frozen=True, slots=True)
class Answer:
    """The router's reply to one line of a local chat."""

    text: str
    failed: bool = False  # the text explains a failure (the model could not answer)


@runtime_checkable
class LocalChat(PlatformAdapter, Protocol):
    """A chat surface inside this process (the terminal): a line in, its answer out."""

    # shows a message that answers nothing (a reminder) at once; False: not now (it is
    # kept for take_notices)
    on_notice: Callable[[str], bool] | None

    def event(self, text: str) -> MessageEvent:
        """`text` as a message event from the local owner."""

    def take_notices(self) -> list[str]:
        """Messages sent to the terminal that answer nothing (reminders), oldest first."""

    async def ask(self, text: str, on_partial: Callable[[str], None] | None = None) -> Answer:
        """Send one line through the router; its reply. Cancelling sends /stop. A reply
        streamed to the terminal passes through `on_partial` as it is written."""


@runtime_checkable
class ServesOnStandby(PlatformAdapter, Protocol):
    """A leased platform whose pushed requests (its webhook routes: a button's press
    POSTed to whichever instance the balancer picks) may reach an instance that does
    not hold its connection, and which sends without that connection (a REST API). On
    such an instance the gateway calls `serve` instead of waiting idle: what is pushed
    there is taken (the session's lease decides who answers) and may be answered from
    there; `start`, once the lease is this instance's, adds the connection."""

    async def serve(self, sink: EventSink) -> None:
        """Take pushed requests into `sink`, and be ready to send, without connecting.
        Raises what the SDK raises (the gateway then leaves it waiting for the lease)."""


@runtime_checkable
class SendsFiles(PlatformAdapter, Protocol):
    """A platform the assistant can send files to (up to `capabilities.max_file_bytes`)."""

    async def send_file(self, file: OutboundFile) -> SendResult:
        """Upload `file` into its chat as a document, with its caption; a SendResult as
        `send` gives (retryable, retry_after, outcome_unknown)."""


@dataclass(frozen=True, slots=True)
class ChatMark:
    """The last message read in a chat: `message_id` and `order` as the adapter gave
    them on its event."""

    chat: ChatRef
    message_id: str
    order: int


# What the gateway asks a platform that catches up about: the chats read within
# CATCH_UP_WINDOW, the latest MOST_MARKS of them. Fewer marks than that are every chat
# read within the window: a chat of the platform without one was not read in it.
CATCH_UP_WINDOW = timedelta(days=1)
MOST_MARKS = 200


@runtime_checkable
class CatchesUp(PlatformAdapter, Protocol):
    """A platform that does not redeliver what was sent while no one was connected
    (Discord: a new gateway session replays nothing): the gateway asks it, whenever it
    connects, for what came after the last message read in each chat."""

    async def missed(self, marks: list[ChatMark], most: int) -> list[MessageEvent]:
        """The messages after each mark, oldest first, at most `most` per chat (the bot's
        own included: intake drops them). Raises what the SDK raises."""
