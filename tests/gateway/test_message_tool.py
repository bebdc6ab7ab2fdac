"""`message`: the assistant sends to another chat for the person, through the real app,
the real model client against the fake model server, and two platforms: the first
message to a chat waits for the person's Send button, is delivered once through the
delivery path, and is stored in the target chat's conversation saying where it came
from; later ones go without asking; a chat the owner named is the owner's until
allowed; a message asked for in a process without the target's platform is sent by
the gateway that has it, once."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from gateway.app import build_app
from gateway.edge.events import ChatRef, OutboundMessage
from hermes.identity import owner_user_id
from hermes.places import ChatType
from hermes.state.db import SessionDB
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_commands import ask
from tests.gateway.test_router import dm, group
from tests.harness.wait import until

OTHER = "otherchat"  # the person's second platform, as its own adapter


def offered(request: dict[str, Any]) -> dict[str, Any]:
    return {t["function"]["name"]: t for t in request.get("tools") or ()}


def sends(to: str, text: str) -> Any:
    """A model that calls message(to, text) once per turn, then says what came back."""

    def model(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            result = json.loads(last["content"])
            return Reply(text=f"result: {result.get('status') or result.get('error')}")
        if "message" not in offered(request):
            return Reply(text="no message tool")
        return Reply.tool_call("message", {"to": to, "text": text})

    return model


def run(
    home: Path, fake: FakeOpenAI, body: Any, *, attach_other: bool = True, **sections: Any
) -> Any:
    async def go() -> Any:
        db = SessionDB.open(home)
        uma = db.people.user_for_identity("fakechat", "uma", "Uma")
        db.people.ensure_identity(OTHER, "UMA-2", uma)
        olga = owner_user_id(home)
        db.people.ensure_user(olga, role="owner", display_name="Olga")
        db.people.ensure_identity("fakechat", "olga", olga)
        app = build_app(home, app_config(fake, **sections), db)
        chat, other = FakeAdapter(), FakeAdapter(name=OTHER)
        for adapter in (chat, other) if attach_other else (chat,):
            app.router.attach(adapter)
            await adapter.start(app.router.handle)
        try:
            return await body(app, chat, other, db)
        finally:
            await app.router.stop()
            await app.close()
            db.close()

    return asyncio.run(go())


def question_of(adapter: FakeAdapter) -> tuple[str, OutboundMessage]:
    """The message id and message of the last question with buttons."""
    at, message = next(
        (i, s.message) for i, s in reversed(list(enumerate(adapter.sent))) if s.message.buttons
    )
    return str(at + 1), message


async def press(adapter: FakeAdapter, user: str, message_id: str, command: str) -> None:
    edits = len(adapter.attempts)
    await adapter.deliver(dm(user, command, pressed=True, reply_to_id=message_id))
    await until(lambda: len(adapter.attempts) > edits, "the question edited")


def test_a_first_message_to_the_persons_other_account_waits_for_send_then_goes_once(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = sends(OTHER, "I'm running 10 minutes late")

    async def body(app: Any, chat: FakeAdapter, other: FakeAdapter, db: SessionDB) -> None:
        answer = await ask(chat, dm("uma", "tell my otherchat I'm late"))
        assert "waiting for the person's yes" in answer
        message_id, question = question_of(chat)
        assert "Send this to your otherchat account?" in question.text
        assert "I'm running 10 minutes late" in question.text
        send, dont = question.buttons or ()
        assert (send.label, dont.label) == ("Send", "Don't send")
        assert other.sent == []  # nothing before the yes
        # someone else cannot answer it
        assert "no question of mine" in await ask(chat, dm("olga", send.command, pressed=True))
        assert other.sent == []
        await press(chat, "uma", message_id, send.command)
        assert chat.attempts[-1].text.endswith("Sent.") and chat.attempts[-1].buttons == ()
        await until(lambda: other.sent, "the message delivered")
        [delivered] = other.sent
        assert delivered.message.chat.id == "UMA-2"  # her direct chat there
        assert delivered.message.text.startswith("I'm running 10 minutes late")
        assert "sent from your fakechat chat" in delivered.message.text
        # a second press (a double tap later on) sends nothing more
        assert await ask(chat, dm("uma", send.command)) == "You already said yes to that."
        # stored in the target chat's conversation, saying where it came from
        [session] = [s for s in db.conversations.list_sessions(_user(db)) if s.platform == OTHER]
        [stored] = db.conversations.messages(session.id, _user(db))
        assert stored.role == "assistant" and "sent from your fakechat chat" in stored.content
        assert stored.delivery == "sent"
        # later messages to that chat go without asking
        again = await ask(chat, dm("uma", "tell my otherchat again"))
        assert again == "result: sent"
        await until(lambda: len(other.sent) == 2, "the second message delivered")
        # and when she answers there, the assistant sees what it sent
        fake_llm.responder = None
        fake_llm.push(Reply(text="ok"))
        await ask(other, dataclasses.replace(dm("UMA-2", "thanks!"), platform=OTHER))
        history = fake_llm.requests[-1]["messages"]
        assert any("I'm running 10 minutes late" in str(m.get("content")) for m in history)

    run(home, fake_llm, body)


def _user(db: SessionDB) -> str:
    return db.people.user_for_identity("fakechat", "uma", "Uma")


def test_dont_send_sends_nothing_and_asks_again_next_time(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = sends(OTHER, "see you at 8")

    async def body(app: Any, chat: FakeAdapter, other: FakeAdapter, db: SessionDB) -> None:
        await ask(chat, dm("uma", "tell my otherchat"))
        message_id, question = question_of(chat)
        await press(chat, "uma", message_id, (question.buttons or ())[1].command)
        assert chat.attempts[-1].text.endswith("Not sent.")
        # the answer was handled whole (its question edited): declined, so no process
        # ever claims it for sending (only "ready" messages are sent)
        [declined] = db.confirmations.of_user(_user(db))
        assert declined.status == "declined" and other.sent == []
        asked = await ask(chat, dm("uma", "tell my otherchat"))
        assert "waiting for the person's yes" in asked  # no yes was given: asked again

    run(home, fake_llm, body)


def test_a_chat_the_owner_named_is_the_owners_until_allowed(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    named = {"chats": {"team": f"{OTHER}:chat:room-1"}}

    async def body(app: Any, chat: FakeAdapter, other: FakeAdapter, db: SessionDB) -> None:
        seen: dict[str, set[str]] = {}

        def model(request: dict[str, Any]) -> Reply:
            tool = offered(request).get("message")
            who = request["messages"][-1]["content"]
            if request["messages"][-1]["role"] == "tool":
                return Reply(text=json.loads(who).get("status") or json.loads(who)["error"])
            places = tool["function"]["parameters"]["properties"]["to"]["enum"] if tool else []
            seen["uma" if "uma asks" in who else "olga"] = set(places)
            if "team" in places:
                return Reply.tool_call("message", {"to": "team", "text": "standup moved to 10"})
            return Reply.tool_call("message", {"to": "team", "text": "let me in"})

        fake_llm.responder = model
        refused = await ask(chat, dm("uma", "uma asks"))
        assert seen["uma"] == {OTHER} and "Unknown target 'team'" in refused
        await ask(chat, dm("olga", "olga asks"))
        assert seen["olga"] == {"team"}  # her own accounts: none on the other platform
        message_id, question = question_of(chat)
        assert "team (otherchat)" in question.text
        await press(chat, "olga", message_id, (question.buttons or ())[0].command)
        await until(lambda: other.sent, "the message delivered")
        [delivered] = other.sent
        assert delivered.message.chat.id == "room-1"
        assert "from Olga, sent by the assistant" in delivered.message.text

    run(home, fake_llm, body, message=named)


def test_a_message_asked_for_where_its_platform_is_not_is_sent_by_the_gateway_that_has_it(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    """The terminal's case: the process the person talks to has no Telegram; the gateway
    that has it sends the message at its sweep, once."""
    fake_llm.responder = sends("telegram", "on my way")
    platforms = {"telegram": {"enabled": True}}

    async def asked_here(app: Any, chat: FakeAdapter, other: FakeAdapter, db: SessionDB) -> str:
        uma = _user(db)
        db.people.ensure_identity("telegram", "4242", uma)
        db.confirmations.add(_consent(uma, "message:telegram:user:4242"))
        return await ask(chat, dm("uma", "tell my telegram I'm on my way"))

    answer = run(home, fake_llm, asked_here, attach_other=False, platforms=platforms)
    assert answer == "result: queued"

    async def gateway(app: Any, chat: FakeAdapter, other: FakeAdapter, db: SessionDB) -> list[str]:
        telegram = FakeAdapter(name="telegram")
        app.router.attach(telegram)
        await telegram.start(app.router.handle)
        confirmations = app.router.confirmations
        assert await confirmations.sweep() == 1
        assert await confirmations.sweep() == 0  # once
        return [s.message.text for s in telegram.sent if s.message.chat.id == "4242"]

    [sent] = run(home, fake_llm, gateway, platforms=platforms)
    assert sent.startswith("on my way")


def _consent(user_id: str, subject: str) -> Any:
    from hermes.state.models import Confirmation, utcnow

    now = utcnow()
    return Confirmation(
        code="CONSENTED",
        user_id=user_id,
        kind="message",
        subject=subject,
        status="sent",
        created_at=now,
        expires_at=now,
    )


def test_a_message_to_a_named_group_is_in_the_askers_own_session_there(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    """Group sessions are each person's by default (per_user): what the assistant posted
    in the group for Olga is in her session there (a channel, as her messages there
    say), so when she next talks to it in that channel, it knows what it posted."""
    named = {"chats": {"team": "fakechat:chat:grp"}}

    def model(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            return Reply(text=json.loads(last["content"]).get("status", "?"))
        if "olga asks" in str(last["content"]):
            return Reply.tool_call("message", {"to": "team", "text": "standup moved to 10"})
        return Reply(text="ok")

    def in_channel(text: str) -> Any:
        event = group("olga", text, mentioned=True)
        return dataclasses.replace(event, chat=ChatRef("grp", ChatType.CHANNEL))

    async def body(app: Any, chat: FakeAdapter, other: FakeAdapter, db: SessionDB) -> list[Any]:
        fake_llm.responder = model
        await ask(chat, in_channel("hello all"))
        await ask(chat, dm("olga", "olga asks"))
        message_id, question = question_of(chat)
        await press(chat, "olga", message_id, (question.buttons or ())[0].command)
        await until(lambda: [s for s in chat.sent if s.message.chat.id == "grp"][1:], "posted")
        await ask(chat, in_channel("what did you post here?"))
        return fake_llm.requests[-1]["messages"]

    history = run(home, fake_llm, body, message=named)
    said = [str(m.get("content")) for m in history if m["role"] == "assistant"]
    assert any("standup moved to 10" in s for s in said), said


def test_a_message_whose_sender_stopped_mid_send_is_unknown_and_never_sent_again(
    home: Path, fake_llm: FakeOpenAI, caplog: Any
) -> None:
    """A gateway claimed a message and stopped before the platform answered: it may or
    may not have arrived, so no one sends it again; at its hour's end it shows as
    unknown and the operator's log says so."""
    from datetime import timedelta

    from hermes.state.confirmations import STOPPED_MID_SEND
    from hermes.state.models import utcnow

    async def body(app: Any, chat: FakeAdapter, other: FakeAdapter, db: SessionDB) -> Any:
        row = _consent(_user(db), f"message:{OTHER}:user:UMA-2")
        row.status, row.platform, row.expires_at = "ready", OTHER, utcnow() + timedelta(hours=1)
        db.confirmations.add(row)
        assert db.confirmations.claim(row.code, "a gateway that then stopped") is not None
        confirmations = app.router.confirmations
        assert await confirmations.sweep() == 0  # within its hour: left alone
        assert db.confirmations.get(row.code).status == "sending"  # type: ignore[union-attr]
        assert await confirmations.sweep(utcnow() + timedelta(hours=2)) == 0
        return db.confirmations.get(row.code), other.sent

    row, sent = run(home, fake_llm, body)
    assert (row.status, row.detail, sent) == ("unknown", STOPPED_MID_SEND, [])
    assert "may or may not have been sent" in caplog.text
