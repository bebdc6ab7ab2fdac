"""The assistant's tools on every platform and the terminal, through the real SDKs against
the local fakes, the real model client against the fake model server, and the capability
table: a member's question is searched and the page found is read; the owner's first
use of an MCP server waits for their Allow (a button; typed on the terminal), the turn
then goes on and the server's tool answers the owner, and it is never offered to a
member; `message` reaches the person's linked account on another platform once, after
their Send; a file the assistant writes (`send_file`) arrives in the chat once.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hermes.fence import fenced
from hermes.identity import owner_user_id
from hermes.state.db import SessionDB
from tests.adapters.drivers import (
    SERVED,
    CliDriver,
    Driver,
    TelegramDriver,
    driver_for,
    platforms_with,
)
from tests.adapters.harness import run_gateway, settled, until_settled
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram, Fault
from tests.fakes.web_site import ARTICLE_TEXT, WebSite
from tests.gateway.test_message_tool import sends
from tests.harness.wait import until

ROOT = Path(__file__).resolve().parents[2]
NOTES = {  # an MCP server built with the SDK's own server side, over stdio
    "command": sys.executable,
    "args": ["-m", "tests.fakes.mcp_server", "stdio"],
    "cwd": str(ROOT),
    "include": ["find_note"],
}
TYPED = re.compile(r"`(/confirm [A-Z0-9]+(?: no)?)`")  # the terminal's question: commands to type


@pytest.fixture(params=platforms_with("say", "texts"))
def side(request: pytest.FixtureRequest) -> Driver:
    return driver_for(request)


def offered(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools") or ()}


def seed(home: Path, *sides: Driver) -> None:
    """On each platform: users[0] is this home's owner, users[1] a member."""
    db = SessionDB.open(home)
    try:
        owner = owner_user_id(home)
        db.people.ensure_user(owner, role="owner", display_name="Olga")
        member = db.people.ensure_user("u_00000000000000b1", role="user", display_name="Mia").id
        for side in sides:
            if isinstance(side, CliDriver):  # the terminal is the owner's (as `hermes chat`
                db.people.ensure_identity(side.name, side.user, owner)  # pins it)
                continue
            db.people.ensure_identity(side.name, side.users[0], owner)
            db.people.ensure_identity(side.name, side.users[1], member)
    finally:
        db.close()


def run(home: Path, fake_llm: FakeOpenAI, body: Any, *sides: Driver, **sections: Any) -> Any:
    seed(home, *sides)
    config = app_config(fake_llm, gateway={"streaming": False}, **sections)
    first, *others = sides

    def ready() -> None:
        for side in sides:
            side.ready()

    return run_gateway(
        home,
        fake_llm,
        first.adapter,
        body,
        ready,
        config=config,
        others=[o.adapter for o in others],
    )


def said(side: Driver, user: str) -> list[str]:
    """What the bot posted in `user`'s direct chat (the terminal: everything it showed)."""
    return side.texts() if isinstance(side, CliDriver) else side.texts_to(side.dm_of(user))


async def ask(side: Driver, user: str, text: str, answer: str) -> str:
    """`user` writes `text`; the first new message in their chat containing `answer`."""
    before = Counter(said(side, user))

    def new() -> list[str]:  # the terminal lists its answers before its notices
        return list((Counter(said(side, user)) - before).elements())

    await asyncio.to_thread(side.say, user, text)
    found = await until(
        lambda: [t for t in new() if answer in t],
        lambda: f"no {answer!r} after {text!r}: {new()}",
    )
    return found[0]


async def press(side: Driver, user: str, label: str, outcome: str) -> str:
    """`user` answers the bot's last question in their chat with its button `label` (on
    the terminal, and a platform whose messages carry no buttons here: types its
    command); what the question (or the answer) says then."""
    if isinstance(side, CliDriver) or not side.can("press"):
        question = next(t for t in reversed(said(side, user)) if "/confirm" in t)
        yes, no = TYPED.findall(question)
        return await ask(side, user, yes if label in ("Allow", "Send") else no, outcome)
    chat = side.dm_of(user)
    message, _, command = next(b for b in reversed(side.buttons(chat)) if b[1] == label)
    await asyncio.to_thread(side.press, chat, message, command, user)
    await until(
        lambda: outcome in side.message_text(chat, message),
        lambda: f"the question never said {outcome!r}: {side.message_text(chat, message)!r}",
    )
    return side.message_text(chat, message)


def test_a_member_searches_the_web_and_reads_the_page_found(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    """The model searches (a self-hosted SearXNG's JSON API, on this machine), reads the
    page it found with web_fetch (loopback allowed by name) and answers from its fenced
    text."""
    site = WebSite().start()
    person = side.users[1]  # a member; on the terminal, its owner
    article = f"{site.root}/article"

    def model(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            result = json.loads(last["content"])
            [call] = request["messages"][-2]["tool_calls"]
            if call["function"]["name"] == "web_search":
                assert article in last["content"], result  # the search found the page
                return Reply.tool_call("web_fetch", {"url": article})
            inside = fenced(result.get("content", ""))
            said = " ".join(inside[1].split()) if inside else ""
            return Reply(text="It says the night train is back." if ARTICLE_TEXT in said else "?")
        if not {"web_search", "web_fetch"} <= offered(request):
            return Reply(text="I cannot search.")
        return Reply.tool_call("web_search", {"query": "night train Vienna Rome"})

    async def body() -> str:
        fake_llm.responder = model
        return await ask(side, person, "is the night train to Rome back?", "It says")

    web = {
        "allow_networks": ["loopback"],
        "search": {"backend": "searxng", "url": site.root},
    }
    try:
        answer = run(home, fake_llm, body, side, tools={"web": ["user"]}, web=web)
    finally:
        site.stop()
    assert answer == "It says the night train is back."
    assert [path.split("?")[0] for path, _ in site.requests] == ["/search", "/article"]


def test_the_owners_mcp_server_waits_for_allow_then_answers_the_owner_only(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    def model(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            result = json.loads(last["content"])
            if not result["success"]:
                return Reply(text=f"Not yet: {result['error']}")
            inside = fenced(result["content"])
            return Reply(text=inside[1].strip() if inside else "?")
        if "mcp_notes_find_note" in offered(request):
            return Reply.tool_call("mcp_notes_find_note", {"query": "bike"})
        return Reply(text="I have no notes for you.")

    owner, member = side.users[:2]
    out: dict[str, str] = {}

    async def body() -> None:
        fake_llm.responder = model
        out["first"] = await ask(side, owner, "what's my bike lock code?", "Not yet")
        out["question"] = next(t for t in reversed(said(side, owner)) if "Allow the notes" in t)
        before = len(said(side, owner))
        out["allowed"] = await press(side, owner, "Allow", "Allowed")
        # the turn goes on: the tool it waited for answers, without asking again
        found = await until(
            lambda: [t for t in said(side, owner)[before:] if "Note about" in t],
            lambda: f"the turn never went on: {said(side, owner)[before:]}",
        )
        out["went_on"] = found[0]
        out["then"] = await ask(side, owner, "what's my bike lock code?", "Note about")
        if not isinstance(side, CliDriver):
            out["member"] = await ask(side, member, "what's my bike lock code?", "notes")

    run(home, fake_llm, body, side, mcp={"servers": {"notes": NOTES}})
    assert "4312" not in out["first"] and "Allow" in out["first"]
    assert "Allow the notes tools?" in out["question"]
    assert out["allowed"].endswith("Allowed.")
    assert out["went_on"] == "Note about bike: the bike lock code is 4312."
    assert out["then"] == "Note about bike: the bike lock code is 4312."
    assert out.get("member", "I have no notes for you.") == "I have no notes for you."
    member_requests = [r for r in fake_llm.requests if "mcp_notes_find_note" not in offered(r)]
    assert isinstance(side, CliDriver) or member_requests, "the member was never asked"


# from each platform with buttons to the next one: every platform sends and receives
PAIRS = [("telegram", "slack"), ("slack", "discord"), ("discord", "telegram")]


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
def test_message_reaches_the_persons_linked_account_once_after_send(
    home: Path, fake_llm: FakeOpenAI, request: pytest.FixtureRequest, source: str, target: str
) -> None:
    here, there = (_driver(request, name) for name in (source, target))
    person = here.users[0]
    their_dm = there.dm_of(there.users[0])
    fake_llm.responder = sends(there.name, "Running 10 minutes late")
    out: dict[str, Any] = {}

    async def body() -> None:
        out["waiting"] = await ask(here, person, f"tell my {there.name} I'm late", "result:")
        out["before"] = list(there.texts_to(their_dm))
        chat = here.dm_of(person)
        message, _, command = next(b for b in here.buttons(chat) if b[1] == "Send")
        out["shown"] = await press(here, person, "Send", "Sent.")
        await until(lambda: there.texts_to(their_dm), f"nothing reached {there.name}")
        presses = settled()
        await asyncio.to_thread(here.press, chat, message, command, person)  # a double tap
        await until_settled(presses + 1)
        out["delivered"] = list(there.texts_to(their_dm))

    run(home, fake_llm, body, here, there)
    assert out["waiting"] == "result: waiting for the person's yes"
    assert out["before"] == []  # nothing before the yes
    assert "Send this to your" in out["shown"] and out["shown"].endswith("Sent.")
    [delivered] = out["delivered"]
    assert delivered.startswith("Running 10 minutes late")
    assert f"sent from your {here.name} chat" in delivered


def _driver(request: pytest.FixtureRequest, name: str) -> Driver:
    cls = next(d for d in SERVED if d.name == name)
    assert cls.fixture is not None
    return cls(request.getfixturevalue(cls.fixture))


@pytest.fixture(params=platforms_with("say", "files", "fail_next_upload"))
def sender(request: pytest.FixtureRequest) -> Driver:
    return driver_for(request)


def writes_a_file(name: str, content: str, caption: str = "") -> Any:
    """The model: calls send_file when it is offered, then says how it went."""

    def model(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            result = json.loads(last["content"])
            if result.get("success"):
                return Reply(text=f"Sent {result['sent']} ({result['size']}).")
            return Reply(text=f"Not sent: {result['error']}")
        if "send_file" not in offered(request):
            return Reply(text="Not sent: I cannot send files here.")
        args = {"name": name, "content": content, **({"caption": caption} if caption else {})}
        return Reply.tool_call("send_file", args)

    return model


def test_the_assistant_writes_a_file_and_it_arrives_in_the_chat_once(
    home: Path, fake_llm: FakeOpenAI, sender: Driver
) -> None:
    """A member asks for a file: the model's send_file is uploaded through the platform's
    real SDK into their chat (Telegram sendDocument, Discord's multipart message,
    Slack's external upload, Mattermost POST /files, Matrix's content repository; the
    terminal saves it), byte for byte as UTF-8, with its caption, once although the
    first upload was refused with a 429; the reply follows, and the call stays in the
    conversation."""
    person = sender.users[1]
    content = "item,cost,note\nrent,900,\ncoffee,3.5,café ☕ 東京\n"
    fake_llm.responder = writes_a_file("budget.csv", content, "Your budget")

    async def body() -> str:
        sender.fail_next_upload()
        return await ask(sender, person, "put my budget in a file", "Sent ")

    answer = run(home, fake_llm, body, sender)
    size = len(content.encode())
    assert answer == f"Sent budget.csv ({size} bytes)."
    assert sender.files(person) == [("budget.csv", content.encode(), "Your budget")]
    db = SessionDB.open(home)
    try:
        user = db.people.user_for_identity(sender.name, person)
        assert user is not None
        [session] = db.conversations.list_sessions(user)
        calls = [m for m in db.conversations.messages(session.id, user) if m.role == "tool"]
    finally:
        db.close()
    assert len(calls) == 1 and '"sent": "budget.csv"' in calls[0].content


def test_a_file_the_tool_does_not_send_is_refused_in_words_and_nothing_is_uploaded(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    """An HTML page (active content when opened) and a name with a folder are refused
    before any upload; a member is not offered the tool where `tools.files` is for
    admins."""
    side = TelegramDriver(telegram)
    answers = []

    async def body() -> None:
        fake_llm.responder = writes_a_file("page.html", "<script>alert(1)</script>")
        answers.append(await ask(side, side.users[0], "make me a page", "Not sent"))
        fake_llm.responder = writes_a_file("../../.bashrc.txt", "echo hi")
        answers.append(await ask(side, side.users[0], "write my bashrc", "Not sent"))

    run(home, fake_llm, body, side)
    assert "'page.html' is not a text format I send" in answers[0]
    assert "not a plain file name" in answers[1]
    assert telegram.documents == [] and telegram.sent("sendDocument") == []

    async def member() -> str:
        fake_llm.responder = writes_a_file("notes.md", "# Notes")
        return await ask(side, side.users[1], "notes please", "Not sent")

    answer = run(home, fake_llm, member, side, tools={"files": ["admin"]})
    assert answer == "Not sent: I cannot send files here."
    assert telegram.documents == []


def test_an_upload_the_platform_refuses_is_told_to_the_model_and_kept_in_the_ledger(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    """A refusal is not retried; the model hears why, and the delivery ledger has it as
    it has a reply that could not be delivered."""
    side = TelegramDriver(telegram)
    fake_llm.responder = writes_a_file("notes.md", "# Notes")

    async def body() -> str:
        telegram.faults.append(Fault("sendDocument", 400, "Bad Request: wrong file type"))
        return await ask(side, side.users[0], "notes please", "Not sent")

    answer = run(home, fake_llm, body, side)
    assert "it was not sent" in answer and "wrong file type" in answer.lower()  # (PTB rewords)
    assert len(telegram.sent("sendDocument")) == 1 and telegram.documents == []
    db = SessionDB.open(home)
    try:
        [failed] = db.conversations.failed_deliveries("telegram")
    finally:
        db.close()
    assert failed.chat_id == side.users[0] and "wrong file type" in str(failed.error).lower()
