"""`hermes gateway run` when its PostgreSQL server is not there yet (a reboot where the
gateway starts first) versus when the configuration is wrong: the first is waited for
with a growing pause and, if it never comes, ends with exit 75, which the systemd unit
restarts; the second ends at once with exit 2, which it does not."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.cli import HERMES
from tests.harness.homes import telegram_home
from tests.harness.postgres import ScratchServer
from tests.harness.relay import LatePort
from tests.harness.wait import wait_until

pytestmark = pytest.mark.slow
UNIT = Path(__file__).parents[2] / "deploy" / "hermes-gateway.service"


@pytest.fixture
def database(postgres: ScratchServer) -> Iterator[tuple[str, str]]:
    """A role and its database as deploy/README step 9 makes them: (role, database)."""
    role, name = postgres.documented()
    yield role, name
    postgres.drop_database(name)
    postgres.drop_role(role)


class Gateway:
    """The process, its log read as it is written."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen(
            [*HERMES, "gateway", "run"],
            env=dict(os.environ, HERMES_HOME=str(home), TG_TOKEN="123:ABC"),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: list[str] = []

        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            for line in self.proc.stderr:
                self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def ended(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(timeout)  # the whole log read
        return code


def configure(home: Path, llm: FakeOpenAI, telegram: FakeTelegram, url: str, wait: float) -> None:
    telegram_home(home, llm, telegram, database={"url": url, "startup_wait_seconds": wait})


def test_a_database_that_comes_up_after_the_gateway_is_waited_for(
    home: Path,
    fake_llm: FakeOpenAI,
    telegram: FakeTelegram,
    postgres: ScratchServer,
    database: tuple[str, str],
) -> None:
    role, name = database
    late = LatePort(("127.0.0.1", 5432))
    configure(home, fake_llm, telegram, f"postgresql://{role}@127.0.0.1:{late.port}/{name}", 120)
    fake_llm.default = Reply(text="Up at last.")
    gateway = Gateway(home)
    try:
        wait_until(lambda: "not there yet" in gateway.log, "a wait for the database", 60)
        assert gateway.proc.poll() is None  # waiting, not exited
        late.open()  # PostgreSQL is up
        telegram.user_message("hello", user_id=42)
        wait_until(
            lambda: gateway.proc.poll() is not None or telegram.shown(42) == ["Up at last."],
            lambda: gateway.log[-3000:],
            90,
        )
        assert gateway.proc.poll() is None, gateway.log[-3000:]
    finally:
        gateway.proc.send_signal(signal.SIGTERM)
        code = gateway.ended()
        late.close()
    assert code == 0 and "Traceback" not in gateway.log, gateway.log[-3000:]


def test_a_database_that_never_comes_exits_with_the_code_the_unit_restarts(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, database: tuple[str, str]
) -> None:
    role, name = database
    late = LatePort(("127.0.0.1", 5432))  # never opened
    configure(home, fake_llm, telegram, f"postgresql://{role}@127.0.0.1:{late.port}/{name}", 2)
    gateway = Gateway(home)
    code = gateway.ended()
    assert code == 75, gateway.log
    assert "not there yet" in gateway.log and "Traceback" not in gateway.log
    assert not telegram.sent("getMe")
    prevented = [line for line in UNIT.read_text().splitlines() if line.startswith("RestartPre")]
    assert prevented == ["RestartPreventExitStatus=2"]  # 75 is restarted


@pytest.mark.parametrize("mistake", ["role", "database"])
def test_a_wrong_role_or_database_name_exits_2_at_once(
    home: Path,
    fake_llm: FakeOpenAI,
    telegram: FakeTelegram,
    database: tuple[str, str],
    mistake: str,
) -> None:
    """The server answered: no wait and no restart mends a name that does not exist."""
    role, name = database
    role, name = (f"{role}_typo", name) if mistake == "role" else (role, f"{name}_typo")
    configure(home, fake_llm, telegram, f"postgresql://{role}@127.0.0.1:5432/{name}", 600)
    gateway = Gateway(home)
    code = gateway.ended(timeout=60)  # the 600 s wait is not spent
    assert code == 2, gateway.log
    assert "does not exist" in gateway.log and "not there yet" not in gateway.log
    assert "Traceback" not in gateway.log
