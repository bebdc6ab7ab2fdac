from __future__ import annotations

import pytest

from gateway.admission.session_key import Scope, session_key
from gateway.edge.events import ChatRef, MessageEvent, UserRef
from hermes.places import ChatType


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


def test_a_session_key_is_where_the_message_is_plus_whose_session_it_is() -> None:
    """One type for where a message is (hermes.places.Surface): the session key is one
    with the sender's platform account added (never our user id), and a thread of a group
    is recorded as the kind 'thread' and read back as a group's."""
    from hermes.places import Surface

    key = session_key(event("slack", ChatType.CHANNEL, "C1", "U1", "1700.1"))
    assert isinstance(key, Surface) and key.platform_user_id == "U1" and not key.shared
    assert key.kind == "thread" and str(key) == "slack:channel:C1:1700.1:U1"
    dm = session_key(event("telegram", ChatType.DM, "42", "42", None))
    assert dm.kind == "dm" and dm.is_dm
    back = Surface.recorded("slack", key.kind, "C1", "1700.1")
    assert back.chat_type is ChatType.GROUP and back.kind == "thread"
