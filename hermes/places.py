"""Where a message is, as one type for the whole project: the platform, its chat (a DM, a
group or a channel) and the thread in it. Adapters make one per event; the gateway's
session key is one with the sender added; a session records where it started by its
`kind`. (A light module: adapters and `hermes --help` import it.)"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ChatType(StrEnum):
    DM = "dm"
    GROUP = "group"
    CHANNEL = "channel"


THREAD = "thread"  # the kind of a thread of a group or a channel, as sessions record it


@dataclass(frozen=True, slots=True)
class Surface:
    """Where a turn happens; the session keeps where it started."""

    platform: str
    chat_type: ChatType = ChatType.DM
    chat_id: str = ""
    thread_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.chat_type, ChatType):  # a plain "dm" (a test, a literal)
            object.__setattr__(self, "chat_type", _chat_type(str(self.chat_type)))

    @classmethod
    def recorded(
        cls, platform: str, kind: str, chat_id: str = "", thread_id: str | None = None
    ) -> Surface:
        """The surface a session or a reminder recorded by its `kind` ('thread' is a
        thread of a group or a channel: read as a group's)."""
        return cls(platform, _chat_type(kind), chat_id, thread_id)

    @property
    def kind(self) -> str:
        """How a session or a reminder records where it is: the chat's type, or 'thread'
        for a thread of a group or a channel."""
        if self.thread_id and self.chat_type is not ChatType.DM:
            return THREAD
        return self.chat_type.value

    @property
    def is_dm(self) -> bool:
        return self.chat_type is ChatType.DM


def _chat_type(kind: str) -> ChatType:
    """A recorded kind's chat type: a thread's, or one no longer known, read as a group's."""
    try:
        return ChatType(kind)
    except ValueError:
        return ChatType.GROUP


__all__ = ["THREAD", "ChatType", "Surface"]
