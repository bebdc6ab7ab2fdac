"""The event loop never waits on storage: in the message path every database call is
awaited through the database executor (`SessionDB.run`), so a person's message, its turn
and its reply take no connection on the loop's thread (hermes/state/loopguard.py watches
it, on both backends); and a writer holding the lock elsewhere does not stall the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.app import build_app
from hermes.state.db import SessionDB
from hermes.state.loopguard import GUARD
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm


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
