"""Approve / Deny buttons for access requests, on every platform, through the real SDKs.

A stranger's DM puts the request to the admin as a message with two buttons (Telegram
inline keyboard, Slack block actions, Discord components). The tests press them as an
admin, as a non-admin, twice, and after the request expired.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from gateway.pipeline.router import APPROVED_REPLY
from hermes.state.access import CODE_ALPHABET
from hermes.state.db import SessionDB
from hermes.state.models import AccessRule, PairingRequest, utcnow
from tests.adapters.drivers import Driver, driver_for, platforms_with
from tests.adapters.harness import run_gateway, settled, until_settled
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI
from tests.harness.wait import until

CODE = re.compile(f"(?<![A-Za-z0-9])([{CODE_ALPHABET}]{{8}})(?![A-Za-z0-9])")


@pytest.fixture(params=platforms_with("buttons", "press", "message_text"))
def side(request: pytest.FixtureRequest) -> Driver:
    return driver_for(request)


def seed(home: Path, side: Driver) -> None:
    """An admin and an allowed member on the platform; everyone else is a stranger."""
    db = SessionDB.open(home)
    try:
        db.people.ensure_user("u_00000000000000ad", role="admin", display_name="Ann Admin")
        db.people.ensure_identity(side.name, side.users[0], "u_00000000000000ad")
        db.access.set_rule(
            AccessRule(platform=side.name, kind="user", subject=side.users[1], rule="allow")
        )
    finally:
        db.close()


def run(home: Path, fake_llm: FakeOpenAI, side: Driver, body: Callable[[], Awaitable[Any]]) -> Any:
    seed(home, side)
    config = app_config(
        fake_llm, access={"allow_all": False, "pairing": True}, gateway={"streaming": False}
    )
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
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    admin_dm, member_dm = side.dm_of(side.users[0]), side.dm_of(side.users[1])
    stranger, late = side.users[2:]
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
        out["asked"] = side.message_text(admin_dm, message)
        # a member who is not an admin presses Approve: refused, nothing changes
        side.press(admin_dm, message, f"/admin approve {code}", side.users[1])
        out["refusal"] = await until(lambda: side.texts_to(member_dm), "no refusal")
        out["after_member"] = pairing(home, code).status
        # the admin presses Approve: decided, the message says so, the buttons go
        side.press(admin_dm, message, f"/admin approve {code}", side.users[0])
        await until(lambda: "Approved by" in side.message_text(admin_dm, message), "never approved")
        out["approved"] = side.message_text(admin_dm, message)
        out["told"] = await until(
            lambda: [t for t in side.texts_to(side.dm_of(stranger)) if "approved" in t],
            "the stranger was never told",
        )
        decided_at = pairing(home, code).decided_at
        posts_to_admin = len(side.texts_to(admin_dm))
        # a second press (a double tap): nothing is decided again, nothing new is said
        presses = settled()
        side.press(admin_dm, message, f"/admin deny {code}", side.users[0])
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
        side.press(admin_dm, late_message, f"/admin approve {late_code}", side.users[0])
        await until(lambda: "Expired" in side.message_text(admin_dm, late_message), "never expired")
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
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    stranger = side.users[2]

    async def body() -> None:
        side.say(stranger, "hi")
        reply = await until(lambda: side.texts_to(side.dm_of(stranger)), "no pairing reply")
        code = CODE.search(reply[0]).group(1)  # type: ignore[union-attr]
        message = (await until(lambda: side.buttons(side.dm_of(side.users[0])), "no buttons"))[0][0]
        presses = settled()
        side.press(side.dm_of(side.users[0]), message, f"/admin approve {code}", stranger)
        await until_settled(presses + 1)  # the press was handled: dropped at intake
        assert len(side.texts_to(side.dm_of(stranger))) == 1  # only the pairing reply
        assert pairing(home, code).status == "pending"

    run(home, fake_llm, side, body)
