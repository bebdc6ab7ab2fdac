"""The router end to end with a fake platform seam, the real agent and the fake LLM."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from gateway.app import build_app
from gateway.edge.events import Attachment, ChatRef, MessageEvent, SendResult, UserRef
from gateway.pipeline.router import NO_TEXT_REPLY, Router, RouterPolicy
from hermes.places import ChatType
from hermes.providers.host import ProviderFactory
from hermes.state.db import SessionDB
from hermes.state.loopguard import GUARD
from hermes.state.models import AccessRule
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter

T = TypeVar("T")
ids = itertools.count(1)


def dm(user: str, text: str, **kw: Any) -> MessageEvent:
    n = next(ids)
    defaults: dict[str, Any] = {"event_id": f"u{n}", "message_id": f"{user}:{n}"}
    defaults.update(kw)
    return MessageEvent(
        "fakechat",
        chat=ChatRef(user, ChatType.DM),
        user=UserRef(user, f"User {user}"),
        text=text,
        **defaults,
    )


def group(user: str, text: str, mentioned: bool = False) -> MessageEvent:
    n = next(ids)
    return MessageEvent(
        "fakechat",
        f"g{n}",
        f"grp:{n}",
        ChatRef("grp", ChatType.GROUP),
        UserRef(user, user),
        text,
        mentioned=mentioned,
    )


def scenario(
    home: Path,
    fake: FakeOpenAI,
    body: Callable[[Router, FakeAdapter], Awaitable[T]],
    policy: RouterPolicy | None = None,
    allowed: set[str] | None = None,
    *,
    provider: ProviderFactory | None = None,
    **sections: dict[str, Any],
) -> T:
    """The app from the composition root with a FakeAdapter attached; `allowed`: only
    these fakechat users are let in (everyone otherwise)."""

    async def go() -> T:
        db = SessionDB.open(home)
        config = app_config(fake, access={"allow_all": allowed is None}, **sections)
        for user in allowed or ():
            db.access.set_rule(
                AccessRule(platform="fakechat", kind="user", subject=user, rule="allow")
            )
        app = build_app(home, config, db, policy=policy, provider=provider)
        adapter = FakeAdapter()
        app.router.attach(adapter)
        await adapter.start(app.router.handle)
        try:
            # the message path never takes a database connection on the loop's thread
            with GUARD.watching(asyncio.get_running_loop()) as seen:
                found = await body(app.router, adapter)
                await app.router.stop()
            assert not seen, "database work on the event loop:\n" + "\n".join(dict.fromkeys(seen))
            return found
        finally:
            await app.router.stop()
            await app.close()
            db.close()

    return asyncio.run(go())


def echo(request: dict[str, Any]) -> Reply:
    last = next(m for m in reversed(request["messages"]) if m["role"] == "user")["content"]
    return Reply(text="echo: " + last.split("\n\n[context")[0])


def test_dm_round_trip_and_typing(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = lambda r: Reply(text=echo(r).text, delay=0.6)  # slow: typing shows

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(dm("alice", "hello there"))
        await adapter.wait_for(1)
        assert adapter.texts() == ["echo: hello there"]
        assert adapter.sent[0].message.reply_to_id is not None and adapter.typing_calls >= 1

    scenario(home, fake_llm, body)


def test_groups_need_a_mention_or_command_and_bots_are_ignored(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = echo

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(group("bob", "just chatting"))
        bot = MessageEvent(
            "fakechat", "b1", "b1", ChatRef("bob", ChatType.DM), UserRef("x", is_bot=True), "beep"
        )
        await adapter.deliver(bot)
        await adapter.deliver(group("bob", "@hermes what's up", mentioned=True))
        await adapter.wait_for(1)
        await asyncio.sleep(0.2)
        assert adapter.texts() == ["echo: @hermes what's up"]

    scenario(home, fake_llm, body)
    assert len(fake_llm.requests) == 1


def test_duplicate_deliveries_are_answered_once(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = echo

    async def body(router: Router, adapter: FakeAdapter) -> None:
        first = dm("alice", "only once")
        await adapter.deliver(first)
        await adapter.deliver(first)  # the same delivery again (a retry)
        twin = MessageEvent(
            first.platform, "other-event", first.message_id, first.chat, first.user, first.text
        )
        await adapter.deliver(twin)  # Slack's message + app_mention for one message
        await adapter.wait_for(1)
        await asyncio.sleep(0.3)

    scenario(home, fake_llm, body)
    assert len(fake_llm.requests) == 1


def test_five_quick_messages_get_five_answers_in_order(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = lambda r: Reply(text=echo(r).text, delay=0.05)

    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        for i in range(5):
            await adapter.deliver(dm("alice", f"message {i}"))
        await adapter.wait_for(5)
        return adapter.texts()

    assert scenario(home, fake_llm, body) == [f"echo: message {i}" for i in range(5)]


def test_merge_mode_answers_queued_messages_together(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = lambda r: Reply(text=echo(r).text, delay=0.3)

    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        await adapter.deliver(dm("alice", "part 0"))
        await asyncio.sleep(0.1)  # its turn is running: the next two wait together
        for i in (1, 2):
            await adapter.deliver(dm("alice", f"part {i}"))
        await adapter.wait_for(2)
        return adapter.texts()

    texts = scenario(home, fake_llm, body, RouterPolicy(queue_mode="merge"))
    assert texts == ["echo: part 0", "echo: part 1\n\npart 2"]


def test_two_users_at_once_keep_separate_sessions(home: Path, fake_llm: FakeOpenAI) -> None:
    both = threading.Barrier(2, timeout=20)  # each model call waits until the other began

    def in_parallel(request: dict[str, Any]) -> Reply:
        both.wait()  # turns one after the other would break the barrier, not pass it
        return echo(request)

    fake_llm.responder = in_parallel

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(dm("alice", "I am alice"))
        await adapter.deliver(dm("bob", "I am bob"))
        await adapter.wait_for(2)

    scenario(home, fake_llm, body)
    assert not both.broken  # the two turns ran at the same time
    histories = [[m["content"] for m in r["messages"][1:]] for r in fake_llm.requests]
    assert all(len(h) == 1 for h in histories)  # neither saw the other's message
    db = SessionDB.open(home)
    users = {s.user_id for s in db.conversations.idle_sessions(timedelta(seconds=-60))}
    assert len(users) == 2
    db.close()


def test_long_replies_are_chunked(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.default = Reply(text="\n\n".join(f"Paragraph {i} " + "word " * 20 for i in range(10)))

    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        await adapter.deliver(dm("alice", "tell me a lot"))
        await adapter.wait_for(5)
        await asyncio.sleep(0.2)
        return adapter.texts()

    texts = scenario(home, fake_llm, body)
    assert len(texts) > 5 and all(len(t) <= 200 for t in texts)
    assert " ".join(" ".join(texts).split()) == " ".join(fake_llm.default.text.split())  # type: ignore[union-attr]


def test_429_waits_exactly_then_sends_once(home: Path, fake_llm: FakeOpenAI) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> float:
        adapter.failures.append(SendResult(False, error="429", retryable=True, retry_after=1.0))
        await adapter.deliver(dm("alice", "hi"))
        started = time.monotonic()
        await adapter.wait_for(1)
        return adapter.sent[0].at - started

    waited = scenario(home, fake_llm, body)
    assert waited >= 0.95


def test_permanent_failure_is_recorded_not_retried(home: Path, fake_llm: FakeOpenAI) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> int:
        adapter.failures.append(SendResult(False, error="Forbidden: bot was blocked by the user"))
        await adapter.deliver(dm("alice", "hi"))
        # the session's next turn starts only once the first one's delivery is settled:
        # a retry of the first reply would be attempted before this one's
        await adapter.deliver(dm("alice", "still there?"))
        await adapter.wait_for(1)
        return len(adapter.attempts)

    assert scenario(home, fake_llm, body) == 2  # the refused reply once, then the next
    db = SessionDB.open(home)
    failed = db.conversations.failed_deliveries("fakechat")
    assert len(failed) == 1 and "blocked" in (failed[0].error or "") and failed[0].message_id
    db.close()


def test_a_message_without_anything_usable_gets_a_short_reply(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        await adapter.deliver(dm("alice", "", attachments=(Attachment("sticker", ref="s1"),)))
        await adapter.deliver(dm("alice", "", attachments=(Attachment("photo", ref="gone"),)))
        await adapter.deliver(dm("alice", "   "))
        await adapter.wait_for(3)
        return adapter.texts()

    sticker, photo, empty = scenario(home, fake_llm, body)
    assert "I can look at photos" in sticker and "sticker" in sticker
    assert photo.startswith("I couldn't fetch a photo")
    assert empty == NO_TEXT_REPLY.format(what="that")
    assert fake_llm.requests == []


def test_unauthorized_users_never_reach_the_model(home: Path, fake_llm: FakeOpenAI) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        await adapter.deliver(dm("mallory", "let me in"))
        await adapter.wait_for(1)
        await adapter.deliver(dm("mallory", "please?"))  # within the minute: silence
        await adapter.deliver(group("mallory", "hi @bot", mentioned=True))  # groups: silence
        await asyncio.sleep(0.3)
        return adapter.texts()

    reply = " ".join(scenario(home, fake_llm, body, allowed={"alice"}))  # one reply, chunked
    assert reply.count("private") == 1
    assert "hermes pairing approve" in reply
    assert fake_llm.requests == []


def test_new_command_starts_a_fresh_session(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = echo

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(dm("alice", "remember the blue door"))
        await adapter.wait_for(1)
        await adapter.deliver(dm("alice", "/new"))
        await adapter.wait_for(2)
        await adapter.deliver(dm("alice", "what door?"))
        await adapter.wait_for(3)

    scenario(home, fake_llm, body)
    last = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"]  # the history started over
    assert "previous conversation" in last[-1]["content"]
