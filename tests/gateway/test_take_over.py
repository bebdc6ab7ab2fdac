"""Taking over a session from an instance that stopped between storing a reply and
sending it (several gateways on PostgreSQL): the reply it stored is sent, the model is
not asked again; one already on its way is never sent twice."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.app import build_app
from gateway.edge.events import event_record
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
DEAD = "gw-dead"


@pytest.mark.parametrize(("state", "sent"), [("stored", True), ("sending", False)])
def test_a_reply_stored_by_a_stopped_instance_is_sent_once_by_the_next(
    home: Path, db: SessionDB, fake_llm: FakeOpenAI, state: str, sent: bool
) -> None:
    fake_llm.default = Reply(text="first answer")

    async def go() -> tuple[list[str], str | None]:
        app = build_app(home, app_config(fake_llm), db)
        adapter = FakeAdapter()
        app.router.attach(adapter)
        shared = app.router.share(db, "gw-here", lease_s=5.0)
        await adapter.start(app.router.handle)
        try:
            await adapter.deliver(dm("alice", "hello"))
            await adapter.wait_for(1)
            while db.cluster.waiting():  # its turn's row finished, the lease let go
                await asyncio.sleep(0.05)
            alice = db.people.user_for_identity("fakechat", "alice")
            (session,) = db.conversations.list_sessions(alice)
            # the other instance: it took "second", stored its turn, then stopped
            second = dm("alice", "second")
            queued = db.cluster.enqueue(
                DEAD,
                session.session_key,
                platform="fakechat",
                ids=[f"e:{second.event_id}", f"m:{second.message_id}"],
                sent_at=second.received_at.timestamp(),
                event=event_record(second),
                ttl=0.2,
            )
            assert queued is not None and queued.held
            add = db.conversations.add_message
            add(session.id, NewMessage("user", "second", platform_message_id=second.message_id))
            reply = add(session.id, NewMessage("assistant", "the stored answer", delivery="stored"))
            assert reply is not None
            if state != "stored":
                db.conversations.set_delivery(reply, state)
            await asyncio.sleep(0.4)  # its lease ran out
            assert await shared.take(session.session_key) == 1
            async with asyncio.timeout(20):  # the taken row settled and finished
                while db.cluster.waiting():
                    await asyncio.sleep(0.05)
            await app.router.stop()
            stored = next(m for m in db.conversations.messages(session.id, alice) if m.id == reply)
            return adapter.texts(), stored.delivery
        finally:
            await app.router.stop()
            await app.close()

    texts, delivery = asyncio.run(go())
    assert len(fake_llm.requests) == 1  # the model was not asked for "second" again
    if sent:
        assert texts == ["first answer", "the stored answer"] and delivery == "sent"
    else:  # on its way when its instance stopped: maybe shown already, never twice
        assert texts == ["first answer"] and delivery == "sending"
