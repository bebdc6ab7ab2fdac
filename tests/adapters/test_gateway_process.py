"""`hermes gateway run` as a real process with the Telegram fake and the fake LLM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway.test_cli_memory import HERMES, hermes


def write_config(
    home: Path, llm: FakeOpenAI, tg: FakeTelegram, token_env: str = "HERMES_TEST_TG_TOKEN"
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {llm.base_url}\n  model: m\n  max_retries: 0\n"
        f"platforms:\n  telegram:\n    enabled: true\n    token_env: {token_env}\n"
        f"    base_url: {tg.base_url}\n    allowed_users: ['42']\n"
        "gateway:\n  http:\n    port: 0\n"
    )


def start(home: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*HERMES, "gateway", "run"],
        env=dict(os.environ, HERMES_HOME=str(home), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_gateway_answers_allowed_users_pairs_strangers_and_stops_on_sigterm(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    write_config(home, fake_llm, telegram)
    fake_llm.default = Reply(text="Hi from the gateway")
    proc = start(home, HERMES_TEST_TG_TOKEN="123:ABC")
    try:
        deadline = time.monotonic() + 30
        while not telegram.sent("setMyCommands"):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            time.sleep(0.1)
        running = hermes("gateway", "status", home=home)
        telegram.user_message("stranger here", user_id=77)
        pairing = str(telegram.wait_sent(1)[0]["text"])
        telegram.user_message("hello", user_id=42)
        telegram.wait_sent(2)
        assert len(fake_llm.requests) == 1  # the stranger never reached the model
        listed = hermes("pairing", "list", home=home)
        code = re.search(r"[A-Z2-9]{8}", pairing)
        assert code is not None and code.group(0) in listed.stdout
        approved = hermes("pairing", "approve", code.group(0), home=home)
        assert approved.returncode == 0, approved.stderr
        telegram.wait_sent(3)  # the gateway notices the approval and tells the requester
        telegram.user_message("thanks", user_id=77)
        telegram.wait_sent(4)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    texts = [str(p["text"]) for p in telegram.sent()]
    assert "private" in texts[0] and texts[1] == "Hi from the gateway"
    assert "approved your request" in texts[2] and texts[3] == "Hi from the gateway"
    assert "platform telegram connected" in err and "gateway stopped" in err
    assert running.returncode == 0 and "Gateway running" in running.stdout
    assert "telegram: connected" in running.stdout
    stopped = hermes("gateway", "status", home=home)
    assert stopped.returncode == 1 and "No gateway is running" in stopped.stdout


def test_a_platform_that_cannot_start_does_not_stop_the_gateway(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    write_config(home, fake_llm, telegram, token_env="HERMES_TEST_MISSING_TOKEN")
    proc = start(home)
    try:
        time.sleep(4)
        assert proc.poll() is None  # still running (the scheduler works)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "HERMES_TEST_MISSING_TOKEN" in err and "platform telegram failed to start" in err


def test_sigterm_during_a_turn_lets_it_finish(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    write_config(home, fake_llm, telegram)
    fake_llm.default = Reply(text="worth the wait", delay=2.0)
    proc = start(home, HERMES_TEST_TG_TOKEN="123:ABC")
    try:
        deadline = time.monotonic() + 30
        while not telegram.sent("setMyCommands"):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        telegram.user_message("a slow question", user_id=42)
        while not fake_llm.requests:  # the turn is running
            assert time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # intake has stopped; the turn goes on
        late = telegram.user_message("sent during shutdown", user_id=42)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert [str(p["text"]) for p in telegram.sent()] == ["worth the wait"]
    assert len(fake_llm.requests) == 1
    # not fetched, not confirmed: Telegram keeps it for the next run
    assert late["update_id"] in [u["update_id"] for u in telegram.updates]
