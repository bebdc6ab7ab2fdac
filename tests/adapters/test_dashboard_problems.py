"""A platform outage as the operator sees it on the dashboard of a running gateway: the
real Telegram adapter against the Bot API fake, down at the start and then back."""

from __future__ import annotations

import asyncio
import html
import os
import re
from datetime import UTC, datetime
from pathlib import Path

from gateway.config import load_config
from gateway.dashboard.auth import Credentials
from gateway.runtime import Gateway
from hermes.identity import owner_user_id
from hermes.state.db import SessionDB
from tests.adapters.test_gateway_process import write_config
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram, Fault
from tests.harness.dashboard import PASSWORD, Browser
from tests.harness.wait import until

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def started(home: Path) -> tuple[SessionDB, Gateway, Browser]:
    """The home's gateway started (Telegram's token in its environment), and a browser
    for its dashboard, the owner's password set."""
    db = SessionDB.open(home)
    owner = owner_user_id(home)
    db.people.ensure_user(owner, role="owner", display_name="Olive")
    Credentials.load(home).set_password(owner, PASSWORD)
    gateway = Gateway(home, load_config(home), db, env={"HERMES_TEST_TG_TOKEN": "123:ABC"})
    await gateway.start()
    return db, gateway, Browser(f"http://127.0.0.1:{gateway.http.port}")


def test_a_platform_down_is_a_problem_on_every_page_until_it_connects(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    write_config(home, fake_llm, telegram)  # (its token in HERMES_TEST_TG_TOKEN)
    for _ in range(3):  # the Bot API down at the start: the first tries fail
        telegram.faults.append(Fault("getMe", status=502, description="Bad Gateway"))

    async def scenario() -> None:
        db, gateway, browser = await started(home)
        try:
            await browser.login()
            _, page = await browser.get("/admin/people")
            banner = re.search(r'<section class="problems" role="alert".*?</section>', page, re.S)
            assert banner is not None and "telegram: failed" in html.unescape(banner.group(0))
            assert 'href="/admin/status#platforms"' in banner.group(0)
            _, page = await browser.get("/admin/status")
            row = re.search(
                r"<tr class=\"bad\"><td[^>]*>telegram</td><td[^>]*>(.*?)</td>", page, re.S
            )
            assert row is not None and "down" in row.group(1) and "failed" in row.group(1)
            await until(lambda: telegram.sent("setMyCommands"), "telegram connected", 60)
            _, page = await browser.get("/admin/status")
            assert "telegram: failed" not in page and '<tr class="bad">' not in page
        finally:
            await browser.close()
            await gateway.stop()
            db.close()

    asyncio.run(scenario())


def test_an_outage_stays_on_the_gateways_page_after_the_platform_is_back(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    """The Bot API down at the start: once Telegram is back, the Gateways page still
    shows the outage with why (and this instance alive, with its platform), the Status
    page counts it in the last 24 h, and the stop ends the recorded spans."""
    write_config(home, fake_llm, telegram)
    for _ in range(2):
        telegram.faults.append(Fault("getMe", status=502, description="Bad Gateway"))

    async def scenario() -> None:
        db, gateway, browser = await started(home)
        try:
            await browser.login()
            await until(lambda: telegram.sent("setMyCommands"), "telegram connected", 60)
            await until(
                lambda: [s.state for s in db.platform_health.spans(T0)] == ["down", "up"],
                "the outage and the recovery recorded",
                10,
            )
            _, page = await browser.get("/admin/gateways")
            text = html.unescape(re.sub(r"<[^>]+>", " ", page))
            section = text.split("Platform health", 1)[1]
            assert "telegram" in section and "1 outage" in section, section
            assert "Bad Gateway" in section and "still down" not in section
            instances = text.split("Instances", 1)[1].split("Platform health", 1)[0]
            assert f":{os.getpid()}" in instances and "alive" in instances
            assert "telegram: connected" in instances
            _, page = await browser.get("/admin/status")
            assert "1 outage" in html.unescape(page)
        finally:
            await browser.close()
            await gateway.stop()
        assert [s.ended for s in db.platform_health.spans(T0)] == [True, True]
        db.close()

    asyncio.run(scenario())
