"""People, access and admin end to end: a whole gateway (the real Gateway with Telegram
and Slack adapters) against the fake platforms and the fake LLM, plus the real CLI."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from gateway.config import load_config
from gateway.runtime import Gateway
from hermes.identity import owner_user_id
from hermes.state.access import CODE_ALPHABET, AccessDB
from hermes.state.db import SessionDB
from hermes.state.people import PeopleDB
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.cli import hermes

T = TypeVar("T")
CODE = re.compile(f"[{CODE_ALPHABET}]{{8}}")
ENV = {"TG_TOKEN": "123:ABC", "SLACK_BOT_TOKEN": "xoxb-t", "SLACK_APP_TOKEN": "xapp-t"}


class Live:
    """Talk to the running gateway as people on Telegram and Slack."""

    def __init__(self, gateway: Gateway, tg: FakeTelegram, slack: FakeSlack) -> None:
        self.gateway, self.telegram, self.slack = gateway, tg, slack
        self.db = gateway.db

    async def tg(self, text: str, user: int = 42, **kw: Any) -> str:
        """Send as `user`; the reply in that chat (others' messages are left aside)."""
        chat = kw.get("chat_id", user)

        def replies() -> list[str]:
            return [str(p["text"]) for p in self.telegram.sent() if p["chat_id"] == chat]

        before = len(replies())
        await asyncio.to_thread(self.telegram.user_message, text, user_id=user, **kw)
        await _until(lambda: len(replies()) > before)
        await asyncio.sleep(0.05)  # a chunked reply: let its other parts land
        return "\n".join(replies()[before:])

    async def tg_silent(self, text: str, user: int = 42, **kw: Any) -> None:
        before = len(self.telegram.sent())
        await asyncio.to_thread(self.telegram.user_message, text, user_id=user, **kw)
        await asyncio.sleep(0.6)
        assert len(self.telegram.sent()) == before, self.telegram.sent()[before:]

    async def slack_dm(self, text: str, user: str = "U1", channel: str = "D1") -> str:
        before = len(self.slack.posted())
        await asyncio.to_thread(self.slack.message, text, user=user, channel=channel)
        await _until(lambda: len(self.slack.posted()) > before)
        await asyncio.sleep(0.05)
        return "\n".join(str(p["text"]) for p in self.slack.posted()[before:])


async def _until(done: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out waiting for a reply"
        await asyncio.sleep(0.02)


def run_live(  # noqa: PLR0917 - the test's fixtures, passed straight through
    home: Path,
    llm: FakeOpenAI,
    tg: FakeTelegram,
    slack: FakeSlack,
    body: Callable[[Live], Awaitable[T]],
    extra: str = "",
) -> T:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {llm.base_url}\n  model: m\n  max_retries: 0\n"
        "memory:\n  review_interval: 0\n"
        "platforms:\n"
        f"  telegram:\n    enabled: true\n    token_env: TG_TOKEN\n    base_url: {tg.base_url}\n"
        "    allowed_users: ['42']\n"
        f"  slack:\n    enabled: true\n    api_base: {slack.api_base}\n"
        "    allowed_users: ['U2']\n"
        # whole replies: what these tests read is each reply's finished text (a loaded
        # machine streams a first draft, "updating my notes…", then edits it)
        "gateway:\n  streaming: false\n  http:\n    port: 0\n" + extra
    )

    async def go() -> T:
        db = SessionDB.open(home)
        owner = owner_user_id(home)
        db.people.ensure_user(owner, role="owner")
        PeopleDB(db).ensure_identity("cli", "local", owner)
        gateway = Gateway(home, load_config(home), db, ENV)
        await gateway.start()
        try:
            await asyncio.to_thread(slack.wait_connected)
            return await body(Live(gateway, tg, slack))
        finally:
            await gateway.stop()
            db.close()

    return asyncio.run(go())


def remembering(fact: str) -> Callable[[dict[str, Any]], Reply]:
    """A model that saves `fact` when told 'remember', and otherwise says ok."""

    def respond(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(text="Saved.")
        if last["role"] == "user" and "remember" in str(last["content"]):
            return Reply.tool_call("memory", {"action": "add", "target": "user", "content": fact})
        return Reply(text="ok")

    return respond


def test_linking_telegram_and_slack_carries_memory_into_the_next_prompt(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, slack: FakeSlack
) -> None:
    fake_llm.responder = remembering("Favourite colour is teal")

    async def body(live: Live) -> dict[str, str]:
        out = {"saved": await live.tg("please remember my favourite colour")}
        out["code_reply"] = await live.tg("/link")
        calls = len(fake_llm.requests)
        out["stranger"] = await live.slack_dm("hello?")  # not linked yet: a pairing code
        assert len(fake_llm.requests) == calls
        code = CODE.search(out["code_reply"])
        assert code is not None
        out["linked"] = await live.slack_dm(f"/link {code.group(0)}")
        out["answer"] = await live.slack_dm("what colour do I like?")
        out["whoami"] = await live.slack_dm("/whoami")
        out["sessions"] = await live.slack_dm("/sessions colour")
        return out

    out = run_live(home, fake_llm, telegram, slack, body)
    assert out["saved"] == "Saved."
    assert "private" in out["stranger"]
    assert out["linked"].startswith("Linked.")
    system = fake_llm.requests[-1]["messages"][0]["content"]
    assert "Favourite colour is teal" in system  # learned on Telegram, in Slack's prompt
    assert "telegram" in out["whoami"] and "slack" in out["whoami"]
    assert "telegram" in out["sessions"]  # the Telegram conversation, found from Slack
    db = SessionDB.open(home)
    assert db.people.user_for_identity("slack", "U1") == db.people.user_for_identity(
        "telegram", "42"
    )
    db.close()


def test_the_owner_links_from_the_cli_then_searches_and_resumes_telegram(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, slack: FakeSlack
) -> None:
    async def body(live: Live) -> dict[str, str]:
        await live.tg("my locker code is zebra-7731")
        code = CODE.search(await live.tg("/link"))
        assert code is not None
        linked = await asyncio.to_thread(hermes, "users", "link", code.group(0), home=home)
        assert linked.returncode == 0, linked.stderr
        found = await asyncio.to_thread(hermes, "sessions", "search", "zebra", home=home)
        assert found.returncode == 0, found.stderr
        whoami = await live.tg("/whoami")  # the gateway notices the link at once
        return {"found": found.stdout, "whoami": whoami}

    out = run_live(home, fake_llm, telegram, slack, body)
    assert "telegram" in out["found"] and "zebra" in out["found"]
    assert "role owner" in out["whoami"] and "cli" in out["whoami"]
    resumed = hermes("chat", "--resume", "latest", "-q", "and what was it again?", home=home)
    assert resumed.returncode == 0, resumed.stderr
    history = [m["content"] for m in fake_llm.requests[-1]["messages"]]
    assert "my locker code is zebra-7731" in history  # the Telegram session, continued


def test_pairing_roles_and_every_admin_command(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, slack: FakeSlack
) -> None:
    admin_commands = [
        "/admin status",
        "/admin users",
        "/admin memory telegram:77",
        "/admin approve ABCDEFGH",
        "/admin deny ABCDEFGH",
        "/admin allow telegram:77",
        "/admin block telegram:77",
    ]

    async def body(live: Live) -> dict[str, Any]:
        out: dict[str, Any] = {"pairing": await live.tg("hi", user=77)}
        await live.tg_silent("hello??", user=77)  # repeated within a minute: no reply
        out["denied"] = [await live.tg(command) for command in admin_commands]
        out["unknown"] = await live.tg("/frobnicate")
        out["calls_before"] = len(fake_llm.requests)
        PeopleDB(live.db).set_role(live.db.people.user_for_identity("telegram", "42"), "admin")
        code = CODE.search(out["pairing"])
        assert code is not None
        told = len(live.telegram.sent())
        out["approved"] = await live.tg(f"/admin approve {code.group(0)}")
        await _until(lambda: any(p["chat_id"] == 77 for p in live.telegram.sent()[told:]))
        out["announced"] = [p["text"] for p in live.telegram.sent()[told:] if p["chat_id"] == 77]
        out["now_in"] = await live.tg("hello again", user=77)
        out["status"] = await live.tg("/admin status")
        out["users"] = await live.tg("/admin users")
        out["memory"] = await live.tg("/admin memory telegram:77")
        out["deny_bad"] = await live.tg("/admin deny ABCDEFGH")
        out["blocked"] = await live.tg("/admin block telegram:77")
        await live.tg_silent("still there?", user=77)
        out["open_chat"] = await live.tg("/admin allow telegram:chat:-100")
        out["group_help"] = await live.tg("/help", user=88, chat_id=-100, chat_type="group")
        out["help"] = await live.tg("/help")
        return out

    out = run_live(home, fake_llm, telegram, slack, body)
    assert "hermes pairing approve" in out["pairing"]
    assert all(reply == "That command needs an admin." for reply in out["denied"])
    assert "know /frobnicate" in out["unknown"] and "/admin" not in out["unknown"]
    assert out["calls_before"] == 0  # strangers and commands never reached the model
    assert out["approved"].startswith("Approved")
    assert len(out["announced"]) == 1 and "approved your request" in out["announced"][0]
    assert out["now_in"] == "ok" and len(fake_llm.requests) == 1
    status = out["status"]
    for part in ("Uptime:", "telegram connected", "slack connected", "Users:", "Job "):
        assert part in status, status
    assert "LLM endpoint: ok" in status and fake_llm.probes == 1
    assert "Search: lexical" in status  # search.embeddings is off
    assert "telegram:77" in out["users"]
    assert "Memory of" in out["memory"]
    assert out["deny_bad"].startswith("No pending request")
    assert out["blocked"].startswith("Blocked") and len(fake_llm.requests) == 1
    assert out["open_chat"].startswith("Allowed")
    assert "/whoami" in out["group_help"]  # a stranger in an allowed group chat
    assert "/admin status" in out["help"]  # admins see the admin commands


def test_no_command_tool_or_search_crosses_users(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, slack: FakeSlack
) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(text="searched")
        if "search" in str(last["content"]):
            return Reply.tool_call("session_search", {"query": "xylophone quokka"})
        return Reply(text="ok")

    fake_llm.responder = respond

    async def body(live: Live) -> dict[str, Any]:
        await live.tg("my secret phrase is xylophone quokka")  # Alice, Telegram 42
        alice = live.db.people.user_for_identity("telegram", "42")
        out: dict[str, Any] = {"alice_session": live.db.conversations.latest_session(alice).id}  # type: ignore[union-attr]
        out["searched"] = await live.slack_dm("search for it", user="U2", channel="D2")  # Bob
        out["why"] = await live.slack_dm("/memory why xylophone", user="U2", channel="D2")
        out["sessions"] = await live.slack_dm("/sessions xylophone", user="U2", channel="D2")
        access = AccessDB(live.db)
        expired = access.create_link_code(alice, ttl=timedelta(seconds=-1)).code
        out["expired"] = await live.slack_dm(f"/link {expired}", user="U2", channel="D2")
        used = access.create_link_code(alice).code
        assert access.redeem_link_code(used, "telegram:42").user_id == alice
        out["used"] = await live.slack_dm(f"/link {used}", user="U2", channel="D2")
        guesses = [
            await live.slack_dm(f"/link {'A' * 7}{n}", user="U2", channel="D2") for n in "234"
        ]
        fresh = access.create_link_code(alice).code  # right code, after 5 failures
        out["locked"] = await live.slack_dm(f"/link {fresh}", user="U2", channel="D2")
        out["guesses"] = guesses
        out["bob"] = live.db.people.user_for_identity("slack", "U2")
        return out

    out = run_live(home, fake_llm, telegram, slack, body)
    tool_result = next(
        m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"
    )
    assert json.loads(tool_result)["results"] == []  # Bob's search sees nothing of Alice
    assert out["why"].startswith("No recorded change")
    assert out["sessions"] == "No conversations found."
    assert "not valid" in out["expired"] and "not valid" in out["used"]
    assert "locked" in out["locked"]
    assert out["bob"] != SessionDB.open(home).people.user_for_identity("telegram", "42")
    shown = hermes("sessions", "show", out["alice_session"], home=home)  # the owner guessing an id
    assert shown.returncode != 0 and "xylophone" not in shown.stdout
    resumed = hermes("chat", "--resume", out["alice_session"], "-q", "hi", home=home)
    assert resumed.returncode != 0


def test_group_memory_none_keeps_personal_stores_out_of_groups(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, slack: FakeSlack
) -> None:
    fake_llm.responder = remembering("Allergic to peanuts")

    async def body(live: Live) -> str:
        await live.tg("remember this please")  # in the DM: saved
        group = {"chat_id": -200, "chat_type": "group", "reply_to_bot": True}
        return await live.tg("remember that too", **group)

    reply = run_live(
        home, fake_llm, telegram, slack, body, extra="privacy:\n  group_memory: none\n"
    )
    assert reply == "Saved."
    group_request = fake_llm.requests[-1]["messages"]
    assert "Allergic to peanuts" not in group_request[0]["content"]  # no personal stores
    tool = next(m for m in group_request if m["role"] == "tool")
    assert "off in group chats" in tool["content"]
    db = SessionDB.open(home)
    user = db.people.user_for_identity("telegram", "42")
    db.close()
    profile = (home / "memories" / user / "USER.md").read_text()
    assert profile == "Allergic to peanuts"  # the DM write only
