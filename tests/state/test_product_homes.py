"""Migration, backup and restore, started from homes the product made by running (the
terminal chat with the model saving a memory and setting a reminder, `hermes gateway run`
answering a person's photo on Telegram, a local memory provider) into PostgreSQL
databases made as deploy/README step 9 says (`createuser`, `createdb --owner`: no
superuser), never from a state a fixture wrote by hand.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.adapters.drivers import TelegramDriver
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.cli import HERMES, hermes
from tests.harness.homes import telegram_home
from tests.harness.postgres import ScratchServer
from tests.harness.wait import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    server = FakeTelegram().start()
    yield server
    server.stop()


def configure(home: Path, llm: FakeOpenAI, telegram: FakeTelegram, **more: object) -> None:
    memory = {"review_interval": 0, "scan": {"judge": "off"}}
    telegram_home(home, llm, telegram, memory=memory, **more)


def run_the_product(home: Path, llm: FakeOpenAI, telegram: FakeTelegram) -> None:
    """What a first day leaves in a home: a chat in the terminal where the model saves a
    memory and sets a reminder, a consolidation, a local provider chosen, then the
    gateway answering a photo on Telegram, stopped with SIGTERM as systemd stops it."""
    notes = ("The boat is moored at the Lyon marina", "The boat's berth is number 12")
    llm.push(
        Reply.tool_call("memory", {"action": "add", "target": "user", "content": "Sails a boat"}),
        *(
            Reply.tool_call("memory", {"action": "add", "target": "memory", "content": note})
            for note in notes
        ),
        Reply.tool_call(
            "schedule", {"action": "add", "message": "check the mooring", "when": "in 3 days"}
        ),
        Reply(text="Noted, and I will remind you."),
    )
    chat = hermes("chat", answer="remember I sail, remind me about the mooring\n", home=home)
    assert chat.returncode == 0 and "remind you" in chat.stdout, chat.stderr
    merged = {
        "entries": [
            {"text": "The boat is moored at the Lyon marina, berth number 12", "sources": [1, 2]}
        ],
        "dropped": [],
    }
    llm.push(Reply(text=json.dumps(merged)))
    consolidated = hermes("memory", "consolidate", "--force", home=home)
    assert consolidated.returncode == 0, consolidated.stdout + consolidated.stderr
    chose = hermes("memory", "setup", "holographic", home=home)
    assert chose.returncode == 0, chose.stdout + chose.stderr
    llm.default = Reply(text="A fine boat.")
    proc = subprocess.Popen(
        [*HERMES, "gateway", "run"],
        env={**_env(home), "TG_TOKEN": "123:ABC"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        TelegramDriver(telegram).photo(b"\xff\xd8\xff\xe0 a jpeg", "my boat")
        wait_until(lambda: proc.poll() is not None or telegram.shown(42), "the photo's answer", 60)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err, err


def _env(home: Path) -> dict[str, str]:
    import os

    return dict(os.environ, HERMES_HOME=str(home))


@pytest.fixture
def documented(postgres: ScratchServer) -> Iterator[list[str]]:
    """The databases a test made with `new_database`, dropped with their roles after."""
    made: list[str] = []
    yield made
    for name in made:
        postgres.drop_database(name)
        postgres.drop_role(name)


def new_database(postgres: ScratchServer, made: list[str]) -> str:
    role, database = postgres.documented()
    made.append(database)
    return f"postgresql://{role}@127.0.0.1:5432/{database}"


READS = (
    ("sessions", "list", "--json"),
    ("memory", "show", "--json"),
    ("memory", "why", "berth", "--json"),  # the consolidation's provenance
    ("reminders", "list"),
)


def reads(home: Path) -> dict[tuple[str, ...], tuple[int, str]]:
    """What the read commands print for `home`, by command."""
    return {args: (done.returncode, done.stdout) for args in READS
            for done in [hermes(*args, home=home)]}  # fmt: skip


def test_a_home_the_product_ran_in_migrates_whole_and_a_failed_copy_can_be_retried(
    tmp_path: Path,
    fake_llm: FakeOpenAI,
    telegram: FakeTelegram,
    postgres: ScratchServer,
    documented: list[str],
) -> None:
    home = tmp_path / "home"
    configure(home, fake_llm, telegram)
    run_the_product(home, fake_llm, telegram)
    before = reads(home)
    assert all(code == 0 for code, _ in before.values()), before
    url = new_database(postgres, documented)
    # a table some other program added to state.db: refused in one line, nothing kept
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("CREATE TABLE my_notes (id INTEGER PRIMARY KEY, note BLOB)")
    refused = hermes("db", "migrate", "--to", url, home=home)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "my_notes" in refused.stderr and "state.db is as it was" in refused.stderr
    assert refused.stderr.count("\n") <= 3  # one message (wrapped), no traceback
    assert _tables(url) == 0  # emptied again: the retry is not refused
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("DROP TABLE my_notes")
    done = hermes("db", "migrate", "--to", url, "--json", home=home)
    assert done.returncode == 0, done.stderr + done.stdout
    assert json.loads(done.stdout)["ok"]
    # switched as the command says: every read the same, and the chat goes on there
    config = yaml.safe_load((home / "config.yaml").read_text())
    config["database"] = {"url": url}
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    (home / "state.db").rename(home / "state.db.migrated")
    assert reads(home) == before
    fake_llm.default = Reply(text="Still here, on PostgreSQL.")
    resumed = hermes("chat", "-q", "and the reminder?", "--resume", "latest", home=home)
    assert resumed.returncode == 0 and "on PostgreSQL" in resumed.stdout, resumed.stderr
    history = json.dumps(fake_llm.requests[-1]["messages"])
    assert "remind me about the mooring" in history  # the first chat's turn, copied
    fresh = hermes("chat", "-q", "do you remember my hobby?", home=home)
    assert fresh.returncode == 0, fresh.stderr
    assert "Sails a boat" in fake_llm.requests[-1]["messages"][0]["content"]  # the memory


def _tables(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        sql = "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def test_a_postgresql_home_restores_into_a_createdb_database(
    tmp_path: Path,
    fake_llm: FakeOpenAI,
    telegram: FakeTelegram,
    postgres: ScratchServer,
    documented: list[str],
) -> None:
    """The gateway ran on PostgreSQL; its backup goes into a new server's database made
    with createdb (which has `public` already), in a home holding only the config.yaml
    that names it, as the docs say."""
    home = tmp_path / "home"
    configure(home, fake_llm, telegram, database={"url": new_database(postgres, documented)})
    run_the_product(home, fake_llm, telegram)
    archive = tmp_path / "home.tar.gz"
    made = hermes("backup", "create", str(archive), home=home)
    assert made.returncode == 0, made.stderr
    before = reads(home)
    assert all(code == 0 for code, _ in before.values()), before
    target = tmp_path / "restored"
    target_url = new_database(postgres, documented)
    target.mkdir(mode=0o700)
    (target / "config.yaml").write_text(yaml.safe_dump({"database": {"url": target_url}}))
    (target / "config.yaml").chmod(0o600)
    # the operator checks the new home first: the read-only command opens the database
    checked = hermes("users", "list", home=target)
    assert checked.returncode == 0, checked.stderr
    done = hermes("backup", "restore", str(archive), home=target)
    assert done.returncode == 0, done.stderr + done.stdout
    kept = yaml.safe_load((target / "config.yaml").read_text())["database"]["url"]
    assert kept == target_url
    assert reads(target) == before
