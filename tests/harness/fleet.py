"""Several `hermes gateway run` processes on one PostgreSQL database, behind a balancer.

Each instance is a real process with a home of its own (as on separate machines) and
the same config: Telegram in webhook mode and Slack's Events API, both pushed by their
fakes to the balancer's URL; Discord's websocket, held by one instance under a lease.
Nothing is patched: the instances find each other through the database only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from gateway.status_file import read_status_file
from hermes.state.cluster import Instance
from hermes.state.db import SessionDB
from tests.fakes.balancer import Balancer
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.matrix_server import TOKEN as MATRIX_TOKEN
from tests.fakes.mattermost_server import TOKEN as MATTERMOST_TOKEN
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.cli import Forked

TG_HOOK_SECRET = "tg-hook-secret"
SLACK_SIGNING = "slack-signing-secret"

ENV = {
    "HERMES_TEST_TG_TOKEN": "123:ABC",
    "HERMES_TEST_TG_HOOK": TG_HOOK_SECRET,
    "HERMES_TEST_SLACK_BOT": "xoxb-fleet",
    "HERMES_TEST_SLACK_SIGNING": SLACK_SIGNING,
    "HERMES_TEST_SLACK_APP": "xapp-fleet",
    "HERMES_TEST_DISCORD": "discord-fleet-token",
    "MATRIX_ACCESS_TOKEN": MATRIX_TOKEN,
    "MATTERMOST_TOKEN": MATTERMOST_TOKEN,
}


@dataclass
class Platforms:
    telegram: FakeTelegram
    slack: FakeSlack
    discord: FakeDiscord


def fleet_config(
    home: Path,
    llm: FakeOpenAI,
    fakes: Platforms,
    balancer_url: str,
    database_url: str,
    *,
    lease_s: float = 3.0,
    telegram_mode: str = "webhook",
    extra: str = "",
    only_telegram: bool = False,
    slack_mode: str = "http",
    memory: str = "  review_interval: 0\n",
    gateway: str = "",
    access: str = "  allow_all: true\n",
) -> None:
    """A fleet member's config.yaml; `memory`, `access` and `gateway`: the lines of those
    sections (the gateway's besides its HTTP server and cluster settings)."""
    home.mkdir(parents=True, exist_ok=True)
    others = (
        ""
        if only_telegram
        else f"  slack:\n    enabled: true\n    mode: {slack_mode}\n"
        "    bot_token_env: HERMES_TEST_SLACK_BOT\n    app_token_env: HERMES_TEST_SLACK_APP\n"
        "    signing_secret_env: HERMES_TEST_SLACK_SIGNING\n"
        f"    api_base: {fakes.slack.api_base}\n"
        "  discord:\n    enabled: true\n    token_env: HERMES_TEST_DISCORD\n"
        f"    api_base: {fakes.discord.api_base}\n"
        f"    gateway_url: {fakes.discord.gateway_url}\n"
    )
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {llm.base_url}\n  model: m\n  max_retries: 0\n  timeout: 30\n"
        + (f"database:\n  url: '{database_url}'\n" if database_url else "")
        + f"memory:\n{memory}"
        + f"access:\n{access}"
        f"gateway:\n  streaming: false\n{gateway}  http:\n    port: 0\n"
        f"  cluster:\n    lease_seconds: {lease_s}\n    poll_seconds: 0.2\n"
        "platforms:\n"
        "  telegram:\n    enabled: true\n    token_env: HERMES_TEST_TG_TOKEN\n"
        f"    base_url: {fakes.telegram.base_url}\n    mode: {telegram_mode}\n"
        f"    webhook_url: {balancer_url}\n    webhook_secret_env: HERMES_TEST_TG_HOOK\n"
        + others
        + extra
    )


@dataclass
class Fleet:
    root: Path
    database_url: str
    lease_s: float
    procs: dict[str, Forked] = field(default_factory=dict)  # by home name
    logs: dict[str, str] = field(default_factory=dict)

    def home(self, name: str) -> Path:
        return self.root / name

    def start(self, name: str) -> Forked:
        """`hermes gateway run` on home `name`, forked from the command line's forking
        server (a real process of its own, without a new interpreter's imports), its
        output added to `name`.log (a restart adds to it)."""
        with (self.root / f"{name}.log").open("a") as log:
            env = dict(os.environ, HERMES_HOME=str(self.home(name)), **ENV)
            proc = Forked(None, "gateway", "run", env=env, output=log.fileno())
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def instances(self) -> list[Instance]:
        db = SessionDB.open(self.root / "probe", self.database_url)
        try:
            return db.cluster.instances(self.lease_s)
        finally:
            db.close()

    def dump(self) -> str:
        """The coordination rows now (for a failure's message)."""
        db = SessionDB.open(self.root / "probe", self.database_url)
        try:
            with db.engine.connect() as conn:
                inbox = conn.exec_driver_sql(
                    "SELECT session_key, state, taken_by, interrupted FROM inbox"
                ).all()
                leases = conn.exec_driver_sql(
                    "SELECT name, holder, expires_at > now() FROM leases"
                ).all()
            return f"inbox: {inbox}; leases: {leases}"
        finally:
            db.close()

    def settled(self) -> bool:
        """Nothing queued and no session held: every turn has ended, its replies sent
        (a reply is sent inside its turn, before the session's lease is let go), so
        nothing more can be sent until someone writes again."""
        db = SessionDB.open(self.root / "probe", self.database_url)
        try:
            with db.engine.connect() as conn:
                busy = conn.exec_driver_sql(
                    "SELECT (SELECT count(*) FROM inbox) + (SELECT count(*) FROM leases "
                    "WHERE name LIKE 'session:%%' AND expires_at >= now())"
                ).scalar_one()
            return int(busy) == 0
        finally:
            db.close()

    def instance_of(self, name: str) -> Instance | None:
        pid = self.procs[name].pid
        return next((i for i in self.instances() if i.pid == pid and i.alive), None)

    def http(self, name: str, timeout: float = 60) -> str:
        """The instance's HTTP base URL once it has started (from its row)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.database_url:
                found = self.instance_of(name)
                where = str(found.info.get("http", "")) if found else ""
            else:  # one gateway on SQLite: its status file
                status = read_status_file(self.home(name))
                where = status.http if status is not None else ""
            if where and not where.endswith(":0"):
                return f"http://{where}"
            proc = self.procs[name]
            assert proc.poll() is None, f"{name} exited {proc.returncode}: {self.log(name)}"
            assert time.monotonic() < deadline, f"{name} never published its address"
            time.sleep(0.1)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop_all(self) -> dict[str, int]:
        codes = {}
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait(10)
        return codes


def start_fleet(
    fleet: Fleet, names: list[str], balancer: Balancer, *, timeout: float = 90
) -> list[str]:
    """Start the instances one by one (the first is the leader), each behind the
    balancer once it listens; their base URLs."""
    urls = []
    for name in names:
        fleet.start(name)
        url = fleet.http(name, timeout)
        balancer.backends.append(url)
        urls.append(url)
    return urls
