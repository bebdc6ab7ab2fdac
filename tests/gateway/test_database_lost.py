"""The PostgreSQL server lost in the middle of a turn (stopped, restarted, the network
gone): the model's reply is not thrown away but delivered, with a word that it is not
saved yet, and stored, in order, before the person's next message once the server is
back; a message that cannot be stored at all gets a reply that says so (never "Something
went wrong"); readiness says the database is not there meanwhile."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gateway.app import build_app
from gateway.pipeline.router import CRASH_REPLY, STORAGE_REPLY
from hermes.agent.agent import UNSAVED_NOTE
from hermes.state.db import SessionDB
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm
from tests.harness.postgres import ScratchServer
from tests.harness.relay import LatePort
from tests.harness.wait import wait_until


def through(relay: LatePort, url: str) -> str:
    """`url` with its host and port those of the relay."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    where = f"127.0.0.1:{relay.port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{where}" if len(netloc) > 1 else where))


def test_a_reply_outlives_the_database_lost_mid_turn(
    home: Path, fake_llm: FakeOpenAI, postgres: ScratchServer
) -> None:
    name, url = postgres.schema()
    target = urlsplit(url)
    relay = LatePort((target.hostname or "127.0.0.1", target.port or 5432))
    relay.open()

    def responder(request: dict[str, Any]) -> Reply:
        said = json.dumps(request["messages"][-1]["content"])
        if "ferry" in said:
            return Reply(text="The ferry leaves at nine.", delay=1.5)
        return Reply(text="Noted.")

    fake_llm.responder = responder

    async def go() -> tuple[list[str], list[bool], list[tuple[str, str]]]:
        db = SessionDB.open(home, through(relay, url))
        app = build_app(home, app_config(fake_llm), db)
        adapter = FakeAdapter()
        app.router.attach(adapter)
        await adapter.start(app.router.handle)
        ready: list[bool] = [db.upkeep.writable()]
        try:
            await adapter.deliver(dm("alice", "when does the ferry leave?"))
            await asyncio.to_thread(wait_until, lambda: len(fake_llm.requests) == 1, 10)
            relay.cut()  # the question is stored; the server goes while the model thinks
            await adapter.wait_for(1)
            ready.append(db.upkeep.writable())
            await adapter.deliver(dm("alice", "and the bus?"))  # still gone: told so
            await adapter.wait_for(2)
            relay.open()
            ready.append(db.upkeep.writable())
            await adapter.deliver(dm("alice", "thanks, the bus it is"))
            await adapter.wait_for(3)
        finally:
            await app.router.stop()
            await app.close()
            db.close()
            relay.cut()
        direct = SessionDB.open(home, url)
        try:
            user_id = direct.people.user_for_identity("fakechat", "alice")
            (session,) = direct.conversations.list_sessions(user_id)
            kept = [(m.role, m.content) for m in direct.conversations.messages(session.id, user_id)]
        finally:
            direct.close()
        return adapter.texts(), ready, kept

    try:
        texts, ready, kept = asyncio.run(go())
    finally:
        postgres.drop_schema(name)
    assert texts[0] == f"The ferry leaves at nine.\n\n{UNSAVED_NOTE}", texts
    assert texts[1] == STORAGE_REPLY and CRASH_REPLY not in texts
    assert texts[2] == "Noted."
    assert ready == [True, False, True]
    assert kept == [
        ("user", "when does the ferry leave?"),
        ("assistant", "The ferry leaves at nine."),
        ("user", "thanks, the bus it is"),
        ("assistant", "Noted."),
    ], kept
