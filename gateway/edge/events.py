"""The data that crosses between platform adapters and the router: frozen DTOs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from hermes.places import ChatType  # where a message is: one type (hermes/places.py)
from hermes.text import valid_text


@dataclass(frozen=True, slots=True)
class ChatRef:
    id: str
    type: ChatType
    thread_id: str | None = None  # forum topic, Slack thread_ts, Discord thread


@dataclass(frozen=True, slots=True)
class UserRef:
    id: str  # the platform's user id: never a path, never our user id
    display_name: str = ""
    is_bot: bool = False

    def __post_init__(self) -> None:  # a name is stored: valid Unicode (hermes/text.py)
        object.__setattr__(self, "display_name", valid_text(self.display_name))


AttachmentKind = Literal["photo", "sticker", "voice", "audio", "video", "document", "other"]


@dataclass(frozen=True, slots=True)
class Attachment:
    kind: AttachmentKind
    name: str = ""
    mime: str = ""
    size: int | None = None  # bytes, when the platform says (checked before downloading)
    ref: str = ""  # how the adapter fetches it: a Telegram file_id, a file URL
    duration: float | None = None  # seconds, for voice and audio when known

    @staticmethod
    def kind_for(mime: str, *, voice: bool = False) -> AttachmentKind:
        """The kind of a file by its MIME type (`voice`: the platform marks it a voice
        message)."""
        if mime.startswith("image/"):
            return "photo"
        if voice:
            return "voice"
        for prefix, kind in (("audio/", "audio"), ("video/", "video")):
            if mime.startswith(prefix):
                return kind  # type: ignore[return-value]
        return "document"


@dataclass(frozen=True, slots=True)
class Button:
    """A button under a message. Pressing it runs `command` as the person who pressed it,
    with every guard of the command table (an admin command stays admins-only)."""

    label: str
    command: str  # a text command: "/admin approve CODE" (64 bytes at most: Telegram's cap)
    style: Literal["primary", "danger", "default"] = "default"


@dataclass(frozen=True, slots=True)
class MessageEvent:
    platform: str
    event_id: str  # the delivery's id (update_id, event_id): redeliveries repeat it
    message_id: str  # unique within the platform (adapters prefix the chat where needed)
    chat: ChatRef
    user: UserRef
    text: str  # a caption counts as text
    reply_to_id: str | None = None
    mentioned: bool = False  # the bot was @-mentioned
    replied_to_bot: bool = False  # the message replies to one of the bot's
    attachments: tuple[Attachment, ...] = ()
    received_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    sent_at: float | None = None  # the platform's timestamp (epoch seconds), for ordering
    # ties in `sent_at` are broken by this: a number that grows within a chat where the
    # timestamp is coarse (Telegram's message_id; its `date` is whole seconds)
    order: int = 0
    # a button press: `text` is the button's command, `reply_to_id` the message it is on
    pressed: bool = False
    raw: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:  # what a person wrote, as every store takes it
        object.__setattr__(self, "text", valid_text(self.text))

    @property
    def addressed(self) -> bool:
        return self.mentioned or self.replied_to_bot


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    chat: ChatRef
    text: str  # the model's Markdown
    reply_to_id: str | None = None
    failed: bool = False  # the text explains a failure (the model could not answer)
    # `text` in the platform's dialect (Capabilities.render), as delivery measured it
    # against the limit: adapters send this instead of rendering again
    rendered: str | None = None
    partial: bool = False  # a streamed reply still being written (an edit will follow)
    # buttons under the message; in an edit, None leaves the message's buttons as they
    # are and () removes them
    buttons: tuple[Button, ...] | None = None

    def as_sent(self, render: Callable[[str], str]) -> str:
        return self.rendered if self.rendered is not None else render(self.text)


@dataclass(frozen=True, slots=True)
class OutboundFile:
    """A file the bot sends (the assistant wrote it: hermes/tools/files.py checked its
    name, type and size): uploaded as a document, `caption` (plain text) with it."""

    chat: ChatRef
    name: str
    mime: str
    data: bytes = field(repr=False)
    caption: str = ""
    reply_to_id: str | None = None


@dataclass(frozen=True, slots=True)
class SendResult:
    ok: bool
    message_ids: tuple[str, ...] = ()
    error: str | None = None
    retryable: bool = False  # safe to send again (the platform surely did not post it)
    retry_after: float | None = None  # seconds the platform asked us to wait (429)
    # no answer (a timeout, a dropped connection): it may have been posted, so it is
    # never sent again; a failure that is neither this nor retryable is a refusal
    outcome_unknown: bool = False


def event_record(event: MessageEvent) -> dict[str, Any]:
    """`event` as JSON-ready data (what another gateway process needs to work it: the
    SDK's `raw` object stays behind); `event_from_record` reads it back."""
    return {
        "platform": event.platform,
        "event_id": event.event_id,
        "message_id": event.message_id,
        "chat": [event.chat.id, event.chat.type.value, event.chat.thread_id],
        "user": [event.user.id, event.user.display_name, event.user.is_bot],
        "text": event.text,
        "reply_to_id": event.reply_to_id,
        "mentioned": event.mentioned,
        "replied_to_bot": event.replied_to_bot,
        "attachments": [
            [a.kind, a.name, a.mime, a.size, a.ref, a.duration] for a in event.attachments
        ],
        "received_at": event.received_at.isoformat(),
        "sent_at": event.sent_at,
        "order": event.order,
        "pressed": event.pressed,
    }


def event_from_record(record: dict[str, Any]) -> MessageEvent:
    chat_id, chat_type, thread_id = record["chat"]
    user_id, display_name, is_bot = record["user"]
    return MessageEvent(
        platform=record["platform"],
        event_id=record["event_id"],
        message_id=record["message_id"],
        chat=ChatRef(chat_id, ChatType(chat_type), thread_id),
        user=UserRef(user_id, display_name, is_bot),
        text=record["text"],
        reply_to_id=record["reply_to_id"],
        mentioned=record["mentioned"],
        replied_to_bot=record["replied_to_bot"],
        attachments=tuple(Attachment(*fields) for fields in record["attachments"]),
        received_at=datetime.fromisoformat(record["received_at"]),
        sent_at=record["sent_at"],
        order=record.get("order", 0),
        pressed=record["pressed"],
    )


__all__ = [
    "Attachment",
    "AttachmentKind",
    "Button",
    "ChatRef",
    "ChatType",
    "MessageEvent",
    "OutboundFile",
    "OutboundMessage",
    "SendResult",
    "UserRef",
    "event_from_record",
    "event_record",
]
