from __future__ import annotations

import pytest

from gateway.events import ChatRef, ChatType, MessageEvent, UserRef
from gateway.session_key import Scope, session_key


def event(
    platform: str, chat_type: ChatType, chat: str, user: str, thread: str | None = None
) -> MessageEvent:
    return MessageEvent(platform, "e1", "m1", ChatRef(chat, chat_type, thread), UserRef(user), "hi")


@pytest.mark.parametrize(
    ("ev", "scope", "key"),
    [
        (event("telegram", ChatType.DM, "42", "42"), Scope.PER_USER, "telegram:dm:42:-:42"),
        (event("telegram", ChatType.DM, "42", "42"), Scope.PER_CHAT, "telegram:dm:42:-:42"),
        (event("telegram", ChatType.GROUP, "-100", "7"), Scope.PER_USER, "telegram:group:-100:-:7"),
        (event("telegram", ChatType.GROUP, "-100", "7"), Scope.PER_CHAT, "telegram:group:-100:-:*"),
        (
            event("telegram", ChatType.GROUP, "-100", "7", "55"),
            Scope.PER_USER,
            "telegram:group:-100:55:7",
        ),
        (
            event("slack", ChatType.CHANNEL, "C1", "U1", "1700.1"),
            Scope.PER_CHAT,
            "slack:channel:C1:1700.1:*",
        ),
        (event("discord", ChatType.GROUP, "g1", "u9"), Scope.PER_USER, "discord:group:g1:-:u9"),
    ],
)
def test_session_keys(ev: MessageEvent, scope: Scope, key: str) -> None:
    assert str(session_key(ev, scope)) == key


def test_two_users_in_a_group_get_separate_sessions_by_default() -> None:
    a = session_key(event("telegram", ChatType.GROUP, "-100", "1"))
    b = session_key(event("telegram", ChatType.GROUP, "-100", "2"))
    assert a != b and str(a) != str(b)
