"""Run a real adapter behind the real router and agent, with the fake LLM, for one test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from gateway.app import App, build_app
from gateway.config import HermesConfig
from gateway.edge.http_server import HttpServer, WebhookAdapter
from gateway.edge.ports import MenuEntry, PlatformAdapter
from hermes.state.db import SessionDB
from hermes.state.loopguard import GUARD
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness.wait import until

T = TypeVar("T")
RUNNING: ContextVar[App] = ContextVar("running_app")  # the app a test body runs beside
# where the adapters' own routes (button presses pushed by a platform) are served
SERVED_AT: ContextVar[str] = ContextVar("served_at")


def settled() -> int:
    """How many inbound events the running router has handled to the end."""
    return RUNNING.get().router.settled


async def until_settled(count: int) -> None:
    """Until the router has handled `count` events to the end: the positive event that
    proves a message or press that must stay unanswered has had its chance."""
    await until(lambda: settled() >= count, lambda: f"only {settled()} of {count} events settled")


def run_gateway(
    home: Path,
    fake_llm: FakeOpenAI,
    make_adapter: Callable[[list[MenuEntry]], PlatformAdapter],
    body: Callable[[], Awaitable[T]],
    ready: Callable[[], None] | None = None,
    *,
    config: HermesConfig | None = None,
    database_url: str | None = None,
    others: Sequence[Callable[[list[MenuEntry]], PlatformAdapter]] = (),
) -> T:
    """The app from the composition root, with one adapter attached (and `others`, for a
    scenario that spans platforms), then started.
    Without a `config`, replies arrive whole: what these tests read is the finished text
    (on a loaded machine a streamed reply's first post can be a part of it;
    tests/adapters/test_streaming.py passes a config of its own)."""

    async def go() -> T:
        db = SessionDB.open(home, database_url)
        whole = app_config(fake_llm, gateway={"streaming": False})
        app = build_app(home, config or whole, db)
        RUNNING.set(app)
        adapters = [make(app.commands.menu()) for make in (make_adapter, *others)]
        server = HttpServer("127.0.0.1", 0, dict)  # as the gateway serves them
        for adapter in adapters:
            for route in adapter.routes() if isinstance(adapter, WebhookAdapter) else ():
                server.add(route)
        await server.start()
        SERVED_AT.set(f"http://127.0.0.1:{server.port}")
        for adapter in adapters:
            app.router.attach(adapter)
            await adapter.start(app.router.handle)
        try:
            # the message path never takes a database connection on the loop's thread
            with GUARD.watching(asyncio.get_running_loop()) as seen:
                if ready is not None:
                    await asyncio.to_thread(ready)
                found = await body()
                await app.router.stop()
            assert not seen, "database work on the event loop:\n" + "\n".join(dict.fromkeys(seen))
            return found
        finally:
            for adapter in adapters:
                await adapter.stop()
            await server.stop()
            await app.router.stop()
            await app.close()
            db.close()

    return asyncio.run(go())


# -- the "two people at once, five messages each" scenario, shared by every platform ----

BURST = 5


def slow_echo(request: dict[str, Any]) -> Reply:
    """Answer 'echo: <the user's words>' after a pause, so later messages queue up."""
    last = next(m for m in reversed(request["messages"]) if m["role"] == "user")["content"]
    return Reply(text="echo: " + last.split("\n\n[context")[0], delay=0.05)


def burst_texts(user: str) -> list[str]:
    return [f"{user} message {n}" for n in range(1, BURST + 1)]


def check_burst(home: Path, platform: str, replies: dict[str, list[str]]) -> None:
    """Each person got their own answers, in order, from a session of their own."""
    db = SessionDB.open(home)
    try:
        for user, texts in replies.items():
            assert texts == [f"echo: {t}" for t in burst_texts(user)], (user, texts)
            user_id = db.people.user_for_identity(platform, user)
            (session,) = db.conversations.list_sessions(user_id)
            said = [
                m.content
                for m in db.conversations.messages(session.id, user_id)
                if m.role == "user"
            ]
            assert [s.split("\n\n[context")[0] for s in said] == burst_texts(user)
    finally:
        db.close()
