"""`hermes doctor` against the fake model and the three fake platforms: all good, then each
thing an operator gets wrong, each named with its fix; the table, --json and exit codes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gateway.config import load_config
from gateway.ops.doctor import Check, run_checks
from gateway.runtime import Gateway
from hermes.state.db import SessionDB
from tests.fakes.discord_server import DiscordFault, FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack, SlackFault
from tests.fakes.telegram_server import FakeTelegram, Fault
from tests.harness.cli import hermes
from tests.state.test_damaged import _healthy, _overwrite_pages

TG_TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"
ENV = {
    "TELEGRAM_BOT_TOKEN": TG_TOKEN,
    "SLACK_BOT_TOKEN": "xoxb-1-abc",
    "SLACK_APP_TOKEN": "xapp-1-abc",
    "DISCORD_BOT_TOKEN": "discord-token",
}


def configure(
    home: Path, llm: FakeOpenAI, tg: FakeTelegram, slack: FakeSlack, dc: FakeDiscord
) -> None:
    write_config(home, llm.base_url, tg.base_url, slack.api_base, dc.api_base, dc.gateway_url)


def write_config(  # noqa: PLR0917 - one URL for each endpoint doctor talks to
    home: Path, llm: str, telegram: str, slack: str, discord: str, discord_gateway: str
) -> None:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    config = home / "config.yaml"
    config.write_text(
        f"llm:\n  base_url: {llm}\n  model: m\n  api_key_env: ''\n  max_retries: 0\n"
        "platforms:\n"
        f"  telegram:\n    enabled: true\n    base_url: {telegram}\n"
        f"  slack:\n    enabled: true\n    api_base: {slack}\n"
        f"  discord:\n    enabled: true\n    api_base: {discord}\n"
        f"    gateway_url: {discord_gateway}\n"
        "gateway:\n  http:\n    port: 0\n"
    )
    config.chmod(0o600)


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {check.name: check for check in checks}


def test_a_healthy_install_passes_every_check_and_each_fault_is_named_with_its_fix(
    home: Path,
    fake_llm: FakeOpenAI,
    telegram: FakeTelegram,
    slack: FakeSlack,
    discord_fake: FakeDiscord,
) -> None:
    configure(home, fake_llm, telegram, slack, discord_fake)
    SessionDB.open(home).close()
    checks = by_name(asyncio.run(run_checks(home, ENV, timeout=10)))
    assert [c for c in checks.values() if c.status == "fail"] == []
    assert "@hermes" in checks["platform telegram"].detail.lower()
    assert "Socket Mode allowed" in checks["platform slack"].detail
    assert checks["model"].status == "ok" and fake_llm.probes == 1 and fake_llm.requests
    assert checks["state.db integrity"].status == "ok"
    assert checks["scheduler"].status == "skip"

    telegram.faults.append(Fault("getMe", 401, "Unauthorized"))
    slack.faults.append(SlackFault("auth.test", 200, "invalid_auth", retry_after=None))
    discord_fake.faults.append(DiscordFault("/users/@me", 401))
    fake_llm.push(Reply(status=500))
    (home / "config.yaml").chmod(0o644)
    checks = by_name(asyncio.run(run_checks(home, ENV, timeout=10)))
    failing = {name for name, check in checks.items() if check.status == "fail"}
    assert failing == {
        "HERMES_HOME permissions",
        "model",
        "platform telegram",
        "platform slack",
        "platform discord",
    }
    assert all(checks[name].fix for name in failing)
    assert "config.yaml (file 644)" in checks["HERMES_HOME permissions"].detail
    assert "did not answer" in checks["model"].detail

    swapped = {**ENV, "SLACK_BOT_TOKEN": "xapp-1-abc", "SLACK_APP_TOKEN": "xoxb-1-abc"}
    checks = by_name(asyncio.run(run_checks(home, swapped, timeout=10)))
    assert "swapped" in checks["platform slack"].detail


def test_damage_inside_state_db_and_a_broken_config_are_reported(home: Path) -> None:
    path = _healthy(home)
    _overwrite_pages(path)
    checks = by_name(asyncio.run(run_checks(home, {}, timeout=2)))
    assert checks["state.db integrity"].status == "fail"
    assert "backup restore" in checks["state.db integrity"].fix
    (home / "config.yaml").write_text("llm: [not, a, mapping\n")
    checks = by_name(asyncio.run(run_checks(home, {}, timeout=2)))
    assert checks["config"].status == "fail" and "YAML" in checks["config"].detail


def test_while_a_gateway_runs_the_scheduler_is_checked_too(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    home.mkdir(parents=True, mode=0o700)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake_llm.base_url}\n  model: m\n  api_key_env: ''\n"
        f"platforms:\n  telegram:\n    enabled: true\n    base_url: {telegram.base_url}\n"
        "gateway:\n  http:\n    port: 0\n"
    )
    (home / "config.yaml").chmod(0o600)

    async def go() -> tuple[dict[str, Check], dict[str, Check]]:
        db = SessionDB.open(home)
        gateway = Gateway(home, load_config(home), db, ENV)
        await gateway.start()
        try:
            for _ in range(300):  # its first run at the first start is over (else it could
                if "consolidation_check" in db.jobs.job_runs():  # overwrite the failure)
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the scheduler's first run never happened")
            running = by_name(await run_checks(home, ENV, timeout=10))
            db.jobs.record_run("consolidation_check", False, "RuntimeError: boom")
            failing = by_name(await run_checks(home, ENV, timeout=10))
        finally:
            await gateway.stop()
            db.close()
        return running, failing

    running, failing = asyncio.run(go())
    assert running["scheduler"].status == "ok", running["scheduler"]
    assert failing["scheduler"].status == "fail" and "boom" in failing["scheduler"].detail


def test_the_command_prints_a_table_or_json_and_exits_non_zero_on_a_problem(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    home.mkdir(parents=True, mode=0o700)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake_llm.base_url}\n  model: m\n  api_key_env: ''\n"
    )
    (home / "config.yaml").chmod(0o600)
    table = hermes("doctor", home=home)
    assert table.returncode == 0, table.stdout + table.stderr
    assert "✓" in table.stdout and "all good" in table.stdout
    fake_llm.stop()  # the model endpoint goes away
    shown = hermes("doctor", "--json", "--timeout", "2", home=home)
    assert shown.returncode == 1 and "Traceback" not in shown.stderr
    report = json.loads(shown.stdout)
    assert report["home"] == str(home) and report["ok"] is False
    model = next(c for c in report["checks"] if c["name"] == "model")
    assert model["status"] == "fail" and "unreachable" in model["detail"] and model["fix"]


def test_webhook_modes_need_a_public_https_url() -> None:
    from gateway.config import HermesConfig
    from gateway.ops.doctor import check_webhooks

    def telegram(url: str | None) -> list[Check]:
        config = HermesConfig.model_validate(
            {"platforms": {"telegram": {"enabled": True, "mode": "webhook", "webhook_url": url}}}
        )
        return check_webhooks(config, {"telegram": config.platforms.telegram})

    assert [c.status for c in telegram("http://bot.example.com")] == ["fail"]
    assert [c.status for c in telegram(None)] == ["fail"]
    assert "https" in telegram(None)[0].fix
    assert [c.status for c in telegram("https://bot.example.com")] == ["ok"]
    slack = HermesConfig.model_validate({"platforms": {"slack": {"enabled": True, "mode": "http"}}})
    shown = check_webhooks(slack, {"slack": slack.platforms.slack})
    assert shown[0].status == "ok" and "/slack/events" in shown[0].detail
    polling = HermesConfig.model_validate({"platforms": {"telegram": {"enabled": True}}})
    assert check_webhooks(polling, {"telegram": polling.platforms.telegram}) == []


def test_an_older_database_is_reported_and_left_as_it_is(home: Path) -> None:
    import sqlite3

    from hermes.state import engine as eng

    home.mkdir(parents=True, mode=0o700)
    old = eng.open_engine(home / "state.db")
    eng.migrate_to(old, 8)
    old.dispose()
    checks = by_name(asyncio.run(run_checks(home, {}, timeout=2)))
    assert checks["state.db schema"].status == "ok"
    assert "version 8: upgraded" in checks["state.db schema"].detail
    raw = sqlite3.connect(home / "state.db")
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 8  # doctor changed nothing
    raw.close()


def test_an_unreachable_platform_is_a_network_problem_not_a_bad_token(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    """Nothing listens where the platforms' APIs should be (a firewall, DNS, a proxy):
    doctor says it cannot reach them and never tells the operator to replace a token
    that was not even tried."""
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening
        dead = f"http://127.0.0.1:{port}"
        write_config(
            home,
            fake_llm.base_url,
            f"{dead}/bot",
            f"{dead}/api/",
            f"{dead}/api/v10",
            f"ws://127.0.0.1:{port}",
        )
        checks = by_name(asyncio.run(run_checks(home, ENV, timeout=10)))
    for name in ("telegram", "slack", "discord"):
        check = checks[f"platform {name}"]
        assert check.status == "fail" and "cannot reach" in check.detail, check
        assert "token" not in check.fix.replace("the token was not tried", ""), check.fix
