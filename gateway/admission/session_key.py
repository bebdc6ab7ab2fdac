"""Session identity as data: one pure function from an event and a scope to a key.

DMs are always one session per person. In groups the default scope is `per_user` (each
person has their own session, their own memory in the prompt); `per_chat` makes the
whole chat one conversation. A thread (forum topic, Slack thread, Discord thread) is
part of the key, so each thread is its own session within its chat.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.edge.events import MessageEvent
from hermes.places import ChatType, Surface


class Scope(StrEnum):
    PER_USER = "per_user"
    PER_CHAT = "per_chat"


@dataclass(frozen=True, slots=True)
class SessionKey(Surface):
    """Where a message is (a Surface), and whose session it is there: the sender's
    account on the platform (never our user id), or None when the chat shares one
    session (per_chat)."""

    platform_user_id: str | None = None

    @property
    def shared(self) -> bool:
        """One conversation for everyone in the chat: it belongs to the chat."""
        return self.platform_user_id is None

    def __str__(self) -> str:  # stored with each session: the format never changes
        parts = [self.platform, self.chat_type.value, self.chat_id]
        parts += [self.thread_id or "-", self.platform_user_id or "*"]
        return ":".join(parts)


def session_key(event: MessageEvent, scope: Scope = Scope.PER_USER) -> SessionKey:
    shared = event.chat.type is not ChatType.DM and scope is Scope.PER_CHAT
    return SessionKey(
        platform=event.platform,
        chat_type=event.chat.type,
        chat_id=event.chat.id,
        thread_id=event.chat.thread_id,
        platform_user_id=None if shared else event.user.id,
    )
