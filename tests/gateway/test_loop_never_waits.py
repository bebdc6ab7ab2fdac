"""The event loop never waits on storage: in the message path every database call is
awaited through the database executor (`SessionDB.run`), so a person's message, its turn
and its reply take no connection on the loop's thread (hermes/state/loopguard.py watches
it, on both backends); and a writer holding the lock elsewhere does not stall the loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from gateway.app import build_app
from hermes.state.db import SessionDB
from hermes.state.loopguard import GUARD
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm
from tests.harness.locks import hold_the_lock


def test_a_message_its_turn_and_its_reply_take_no_connection_on_the_loop(
    home: Path, db: SessionDB, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = lambda request: Reply(text="Noted.")

    async def go() -> tuple[list[str], list[str]]:
        app = build_app(home, app_config(fake_llm), db)
        adapter = FakeAdapter()
        app.router.attach(adapter)
        await adapter.start(app.router.handle)
        try:
            with GUARD.watching(asyncio.get_running_loop()) as seen:
                await adapter.deliver(dm("alice", "hello, I am Alice"))  # a new person
                await adapter.wait_for(1)
                await adapter.deliver(dm("alice", "what is the time?"))  # a known one
                await adapter.wait_for(2)
                found = list(seen)
        finally:
            await app.router.stop()
            await app.close()
        return found, adapter.texts()

    seen, texts = asyncio.run(go())
    assert texts == ["Noted.", "Noted."]
    assert seen == [], "\n".join(seen)


def test_a_writer_holding_the_lock_elsewhere_does_not_stop_the_loop(
    home: Path, db: SessionDB, database_url: str | None, fake_llm: FakeOpenAI
) -> None:
    """While another writer holds the lock, a message's turn waits for it on the
    database executor: the loop keeps running (a ticker counts on), then the reply comes
    once the lock is let go."""
    fake_llm.responder = lambda request: Reply(text="Noted.")
    held, release = threading.Event(), threading.Event()

    async def go() -> tuple[int, int, list[str]]:
        app = build_app(home, app_config(fake_llm), db)
        adapter = FakeAdapter()
        app.router.attach(adapter)
        await adapter.start(app.router.handle)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        counting = asyncio.create_task(ticker())
        holder: threading.Thread | None = None
        try:
            await adapter.deliver(dm("alice", "hello"))  # alice is known before the hold
            await adapter.wait_for(1)
            alice = db.people.user_for_identity("fakechat", "alice")
            (session,) = db.conversations.list_sessions(alice)
            holder = threading.Thread(
                target=hold_the_lock,
                args=(db.path, database_url, session.id, held, release),
                daemon=True,
            )
            holder.start()
            await asyncio.to_thread(held.wait, 10)
            before = ticks
            await adapter.deliver(dm("alice", "and now, while the lock is held?"))
            await asyncio.sleep(0.5)  # its turn waits to store the question meanwhile
            during = ticks - before  # ... and the loop ran on
            replied_while_held = len(adapter.sent) + len(fake_llm.requests) - 1
            release.set()
            await adapter.wait_for(2)
        finally:
            release.set()
            counting.cancel()
            await app.router.stop()
            await app.close()
            if holder is not None:
                holder.join(10)
        return during, replied_while_held, adapter.texts()

    during, replied_while_held, texts = asyncio.run(go())
    assert replied_while_held == 1, texts  # the turn waited for the lock ...
    assert during >= 10  # ... and the loop did not
    assert texts == ["Noted.", "Noted."]


def test_commands_and_a_turn_with_a_memory_write_take_no_connection_on_the_loop(
    home: Path, db: SessionDB, fake_llm: FakeOpenAI
) -> None:
    """The rest of a person's day: a turn whose model writes a memory (the tool, the
    judge, the store and its record), the commands people send most (/help, /memory,
    /new, /status) and a search of past sessions: none on the loop's thread."""

    def responder(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            return Reply(text="Saved.")
        if "remember" in str(last["content"]):
            args = {"action": "add", "target": "user", "content": "Alice keeps bees"}
            return Reply.tool_call("memory", args)
        if "search" in str(last["content"]):
            return Reply.tool_call("session_search", {"query": "bees"})
        return Reply(text="Noted.")

    fake_llm.responder = responder

    async def go() -> list[str]:
        app = build_app(home, app_config(fake_llm), db)
        adapter = FakeAdapter()
        app.router.attach(adapter)
        await adapter.start(app.router.handle)
        said = ["hello", "remember that I keep bees", "/help", "/memory", "/new", "/status"]
        said += ["search what I said about bees"]
        try:
            await adapter.deliver(dm("alice", "hi"))  # known before the watch
            await adapter.wait_for(1)
            with GUARD.watching(asyncio.get_running_loop()) as seen:
                for n, text in enumerate(said, start=2):
                    await adapter.deliver(dm("alice", text))
                    await adapter.wait_for(n)
                await app.agent.drain(10)
                found = list(seen)
        finally:
            await app.router.stop()
            await app.close()
        return found

    seen = asyncio.run(go())
    assert seen == [], "\n".join(dict.fromkeys(seen))


# an argument for each command that takes one (the rest run with none); each row of the
# table, and each subcommand, is run once by an admin in a direct message
ARGUMENTS = {
    "/memory forget": "bees",
    "/memory why": "bees",
    "/timezone": "Europe/Berlin",
    "/reminders cancel": "R1",
    "/sessions": "bees",
    "/link": "ABC123",
    "/unlink": "telegram",
    "/admin memory": "fakechat:alice",
    "/admin approve": "ABC123",
    "/admin deny": "ABC123",
    "/admin allow": "fakechat:dora",
    "/admin block": "fakechat:erin",
}


def test_every_command_takes_no_connection_on_the_loop(
    home: Path, db: SessionDB, fake_llm: FakeOpenAI
) -> None:
    """Every command of the table (each subcommand too, and the ones with no argument
    once more without it), sent by an admin in a direct message: none of them does
    database work on the loop's thread."""
    fake_llm.default = Reply(text="Noted.")

    async def go() -> tuple[list[str], list[str]]:
        app = build_app(home, app_config(fake_llm), db)
        adapter = FakeAdapter()
        app.router.attach(adapter)
        await adapter.start(app.router.handle)
        said: list[str] = []
        for row in app.router.commands.table:
            names = [f"{row.name} {s.name}" for s in row.subcommands] or [row.name]
            for name in names:
                said.append(name)
                if name in ARGUMENTS:
                    said.append(f"{name} {ARGUMENTS[name]}")
        try:
            await adapter.deliver(dm("alice", "remember that I keep bees"))
            await adapter.wait_for(1)
            alice = await db.run(db.people.user_for_identity, "fakechat", "alice")
            await db.run(db.people.set_role, alice, "admin")
            with GUARD.watching(asyncio.get_running_loop()) as seen:
                for n, text in enumerate(said, start=2):
                    await adapter.deliver(dm("alice", text))
                    await adapter.wait_for(n)
                found = list(seen)
        finally:
            await app.router.stop()
            await app.close()
        return found, said

    seen, said = asyncio.run(go())
    assert len(said) > 25  # the whole table was walked
    assert seen == [], "\n".join(dict.fromkeys(seen))
