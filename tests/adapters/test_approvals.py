"""Approve / Deny buttons for access requests, on every platform, through the real SDKs.

A stranger's DM puts the request to the admin as a message with two buttons (Telegram
inline keyboard, Slack block actions, Discord components). The tests press them as an
admin, as a non-admin, twice, and after the request expired.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from adapters.discord.adapter import DiscordAdapter
from adapters.slack.adapter import SlackAdapter
from adapters.telegram.adapter import TelegramAdapter
from gateway.edge.ports import MenuEntry, PlatformAdapter
from gateway.pipeline.router import APPROVED_REPLY
from hermes.state.access import CODE_ALPHABET
from hermes.state.db import SessionDB
from hermes.state.models import AccessRule, PairingRequest, utcnow
from tests.adapters.harness import run_gateway, settled, until_settled
from tests.apps import app_config
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.wait import until

CODE = re.compile(f"(?<![A-Za-z0-9])([{CODE_ALPHABET}]{{8}})(?![A-Za-z0-9])")


@dataclass
class Side:
    name: str
    admin: str  # platform user ids
    member: str  # allowed, not an admin
    strangers: tuple[str, str]
    adapter: Callable[[list[MenuEntry]], PlatformAdapter]
    dm_of: Callable[[str], str]  # a user's DM chat id
    say: Callable[[str, str], None]  # (user, text): a DM to the bot
    texts_to: Callable[[str], list[str]]  # every message the bot posted in a chat
    buttons: Callable[[str], list[tuple[str, str, str]]]  # (message id, label, command) now
    shown: Callable[[str, str], str]  # (chat, message id): what the message shows now
    press: Callable[[str, str, str, str], None]  # (chat, message id, command, user)
    ready: Callable[[], None] | None = None


def _telegram(tg: FakeTelegram) -> Side:
    def buttons(chat: str) -> list[tuple[str, str, str]]:
        latest = {mid: tg.keyboard(params) for c, mid, params in list(tg.posts) if str(c) == chat}
        for method, params in list(tg.calls):
            if method == "editMessageText" and str(params["chat_id"]) == chat:
                latest[int(params["message_id"])] = tg.keyboard(params)
        return [(str(mid), label, data) for mid, row in latest.items() for label, data in row]

    return Side(
        "telegram",
        "42",
        "55",
        ("77", "78"),
        lambda menu: TelegramAdapter("123:T", base_url=tg.base_url, poll_timeout=1, menu=menu),
        lambda user: user,
        lambda user, text: tg.user_message(text, user_id=int(user)) and None,
        lambda chat: [str(p["text"]) for p in tg.sent() if str(p["chat_id"]) == chat],
        buttons,
        lambda chat, mid: tg.messages.get((int(chat), int(mid)), ""),
        lambda chat, mid, data, user: (
            tg.press(int(chat), int(mid), data, user_id=int(user)) and None
        ),
    )


def _slack(slack: FakeSlack) -> Side:
    def buttons(chat: str) -> list[tuple[str, str, str]]:
        latest = {ts: _blocks(params) for c, ts, params in list(slack.posts) if c == chat}
        for method, params in list(slack.calls):
            if method == "chat.update" and params.get("channel") == chat:
                latest[str(params["ts"])] = _blocks(params)
        return [
            (ts, e["text"]["text"], e["value"])
            for ts, blocks in latest.items()
            for block in blocks
            if block.get("type") == "actions"
            for e in block["elements"]
        ]

    return Side(
        "slack",
        "UADMIN",
        "UMEMBER",
        ("USTRANGER", "USTRANGER2"),
        lambda menu: SlackAdapter("xoxb-t", "xapp-t", api_base=slack.api_base),
        lambda user: f"D{user}",
        lambda user, text: slack.message(text, user=user, channel=f"D{user}") and None,
        lambda chat: [str(p["text"]) for p in slack.posted() if p.get("channel") == chat],
        buttons,
        lambda chat, ts: slack.messages.get((chat, ts), ""),
        lambda chat, ts, value, user: slack.press(chat, ts, value, user=user) and None,
        ready=slack.wait_connected,
    )


def _blocks(params: dict[str, Any]) -> list[dict[str, Any]]:
    import json

    blocks = params.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def _discord(fake: FakeDiscord) -> Side:
    def buttons(chat: str) -> list[tuple[str, str, str]]:
        latest = {
            p["message_id"]: p.get("components") or []
            for p in list(fake.posted)
            if p["channel_id"] == chat
        }
        for edit in list(fake.edits):
            if edit["channel_id"] == chat and "components" in edit:
                latest[edit["id"]] = edit["components"]
        return [
            (mid, c["label"], c["custom_id"])
            for mid, rows in latest.items()
            for row in rows
            for c in row.get("components", [])
        ]

    def dm(user: str) -> str:
        return f"6{user[1:]}"

    return Side(
        "discord",
        "700000000000000002",
        "700000000000000005",
        ("700000000000000007", "700000000000000008"),
        lambda menu: DiscordAdapter(
            "bot-token", api_base=fake.api_base, gateway_url=fake.gateway_url, menu=menu
        ),
        dm,
        lambda user, text: fake.message(text, user=user) and None,
        lambda chat: [str(p["content"]) for p in fake.posted if p["channel_id"] == chat],
        buttons,
        lambda chat, mid: fake.messages.get((chat, mid), ""),
        lambda chat, mid, custom_id, user: fake.press(chat, mid, custom_id, user) and None,
    )


@pytest.fixture(params=["telegram", "slack", "discord"])
def side(
    request: pytest.FixtureRequest,
    telegram: FakeTelegram,
    slack: FakeSlack,
    discord_fake: FakeDiscord,
) -> Side:
    make = {"telegram": _telegram, "slack": _slack, "discord": _discord}[request.param]
    fake: Any = {"telegram": telegram, "slack": slack, "discord": discord_fake}[request.param]
    return make(fake)


def seed(home: Path, side: Side) -> None:
    """An admin and an allowed member on the platform; everyone else is a stranger."""
    db = SessionDB.open(home)
    try:
        db.people.ensure_user("u_00000000000000ad", role="admin", display_name="Ann Admin")
        db.people.ensure_identity(side.name, side.admin, "u_00000000000000ad")
        db.access.set_rule(
            AccessRule(platform=side.name, kind="user", subject=side.member, rule="allow")
        )
    finally:
        db.close()


def run(home: Path, fake_llm: FakeOpenAI, side: Side, body: Callable[[], Awaitable[Any]]) -> Any:
    seed(home, side)
    config = app_config(fake_llm, access={"allow_all": False, "pairing": True})
    return run_gateway(home, fake_llm, side.adapter, body, side.ready, config=config)


def pairing(home: Path, code: str) -> PairingRequest:
    db = SessionDB.open(home)
    try:
        request = db.access.pairing(code)
        assert request is not None
        return request
    finally:
        db.close()


def test_approve_deny_buttons_double_press_non_admin_and_expiry(
    home: Path, fake_llm: FakeOpenAI, side: Side
) -> None:
    admin_dm, member_dm = side.dm_of(side.admin), side.dm_of(side.member)
    stranger, late = side.strangers
    out: dict[str, Any] = {}

    async def ask(user: str) -> tuple[str, str]:
        """A stranger asks; their code and the message put to the admin."""
        side.say(user, "hello, may I?")
        reply = await until(lambda: side.texts_to(side.dm_of(user)), "no pairing reply")
        code = CODE.search(reply[0]).group(1)  # type: ignore[union-attr]
        found = await until(
            lambda: [b for b in side.buttons(admin_dm) if b[2].endswith(code)],
            f"no buttons for {code}: {side.buttons(admin_dm)}",
        )
        return code, found[0][0]

    async def body() -> None:
        code, message = await ask(stranger)
        out["buttons"] = [
            (label, command) for mid, label, command in side.buttons(admin_dm) if mid == message
        ]
        out["asked"] = side.shown(admin_dm, message)
        # a member who is not an admin presses Approve: refused, nothing changes
        side.press(admin_dm, message, f"/admin approve {code}", side.member)
        out["refusal"] = await until(lambda: side.texts_to(member_dm), "no refusal")
        out["after_member"] = pairing(home, code).status
        # the admin presses Approve: decided, the message says so, the buttons go
        side.press(admin_dm, message, f"/admin approve {code}", side.admin)
        await until(lambda: "Approved by" in side.shown(admin_dm, message), "never approved")
        out["approved"] = side.shown(admin_dm, message)
        out["told"] = await until(
            lambda: [t for t in side.texts_to(side.dm_of(stranger)) if "approved" in t],
            "the stranger was never told",
        )
        decided_at = pairing(home, code).decided_at
        posts_to_admin = len(side.texts_to(admin_dm))
        # a second press (a double tap): nothing is decided again, nothing new is said
        presses = settled()
        side.press(admin_dm, message, f"/admin deny {code}", side.admin)
        await until_settled(presses + 1)
        out["double"] = (pairing(home, code).status, pairing(home, code).decided_at == decided_at)
        out["admin_posts"] = len(side.texts_to(admin_dm)) - posts_to_admin
        out["buttons_left"] = [b for b in side.buttons(admin_dm) if b[0] == message]
        # a request that expired before anyone pressed
        late_code, late_message = await ask(late)
        db = SessionDB.open(home)
        with Session(db.engine) as session:
            row = session.get(PairingRequest, late_code)
            assert row is not None
            row.expires_at = utcnow() - timedelta(minutes=1)
            session.add(row)
            session.commit()
        db.close()
        side.press(admin_dm, late_message, f"/admin approve {late_code}", side.admin)
        await until(lambda: "Expired" in side.shown(admin_dm, late_message), "never expired")
        out["expired"] = pairing(home, late_code).status

    run(home, fake_llm, side, body)
    assert out["buttons"] == [
        ("Approve", f"/admin approve {CODE.search(out['asked']).group(1)}"),  # type: ignore[union-attr]
        ("Deny", f"/admin deny {CODE.search(out['asked']).group(1)}"),  # type: ignore[union-attr]
    ]
    assert "Access request" in out["asked"]
    assert "needs an admin" in out["refusal"][0] and out["after_member"] == "pending"
    assert "Approved by Ann Admin" in out["approved"]
    assert out["told"][0].startswith(APPROVED_REPLY.split(":")[0])
    assert out["double"] == ("approved", True) and out["admin_posts"] == 0
    assert out["buttons_left"] == []
    assert out["expired"] == "pending"  # expired unanswered: nobody was let in


def test_a_stranger_pressing_a_button_gets_nothing(
    home: Path, fake_llm: FakeOpenAI, side: Side
) -> None:
    stranger = side.strangers[0]

    async def body() -> None:
        side.say(stranger, "hi")
        reply = await until(lambda: side.texts_to(side.dm_of(stranger)), "no pairing reply")
        code = CODE.search(reply[0]).group(1)  # type: ignore[union-attr]
        message = (await until(lambda: side.buttons(side.dm_of(side.admin)), "no buttons"))[0][0]
        presses = settled()
        side.press(side.dm_of(side.admin), message, f"/admin approve {code}", stranger)
        await until_settled(presses + 1)  # the press was handled: dropped at intake
        assert len(side.texts_to(side.dm_of(stranger))) == 1  # only the pairing reply
        assert pairing(home, code).status == "pending"

    run(home, fake_llm, side, body)
