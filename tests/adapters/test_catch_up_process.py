"""A restart of `hermes gateway run`, as a real process, on the platforms that do not
redeliver (Matrix, Mattermost): what people wrote while it was down is answered at the
next start, once and in order, an old message with a line saying it is late, and a
person's first message in a chat the gateway never read is answered too."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.adapters.drivers import Driver, driver_for
from tests.adapters.test_gateway_process import start
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness.wait import wait_until

HOUR_MS = 3_600_000


@pytest.fixture(params=["matrix", "mattermost"])
def side(request: pytest.FixtureRequest) -> Driver:
    return driver_for(request)


def configure(home: Path, fake_llm: FakeOpenAI, side: Driver) -> None:
    home.mkdir(parents=True, exist_ok=True)
    config = {
        "llm": {"base_url": fake_llm.base_url, "model": "m", "max_retries": 0},
        "memory": {"review_interval": 0},
        "access": {"allow_all": True},
        "platforms": {side.name: {"enabled": True, **side.config()}},
        "gateway": {"http": {"port": 0}, "streaming": False},
    }
    (home / "config.yaml").write_text(yaml.safe_dump(config))


def wait(
    check: Callable[[], object], what: str, proc: subprocess.Popen[str], timeout: float = 30
) -> None:
    """`wait_until`, failing at once with its stderr should the gateway exit."""

    def running_and() -> object:
        if proc.poll() is not None:  # its stderr is whole once it has exited
            said = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"the gateway exited: {said}")
        return check()

    wait_until(running_and, what, timeout)


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


def say(side: Driver, person: str, text: str, at: int | None = None) -> None:
    """`person` writes `text` in their DM (while no gateway listens: stored only)."""
    if side.name == "mattermost":
        side.fake.say(person, text, live=False, at=at)
    else:
        side.fake.say(person, text, at=at)


def test_what_was_written_while_the_gateway_was_down_is_answered_at_its_next_start(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    configure(home, fake_llm, side)

    def respond(body: dict[str, Any]) -> Reply:
        said = re.findall(r"ann-\d|bob-\w+", json.dumps(body["messages"][-1]["content"]))
        return Reply(text="re " + said[-1])

    fake_llm.responder = respond
    ann, bob = side.users[:2]

    def answers(person: str) -> list[str]:
        return side.texts_to(side.dm_of(person))

    proc = start(home, **side.env)
    try:
        side.ready()
        side.say(ann, "ann-1")
        wait(lambda: answers(ann), "ann-1 was never answered", proc)
    finally:
        stop(proc)
    now = int(time.time() * 1000)
    say(side, ann, "ann-2")
    say(side, ann, "ann-3")
    say(side, bob, "bob-first", at=now - 2 * HOUR_MS)  # his first words, two hours ago

    def restart_and_say(ann_says: str, bob_says: str) -> str:
        """A start, then a live message in each chat once it connects: each chat's line is
        in order, so its answer comes after every answer of what was caught up (and any
        double); its stderr, after a clean stop."""
        before = connections(side)
        proc = start(home, **side.env)
        try:
            wait(lambda: connections(side) > before, "never connected", proc)
            side.say(ann, ann_says)
            side.say(bob, bob_says)
            wait(
                lambda: f"re {ann_says}" in answers(ann) and f"re {bob_says}" in answers(bob),
                "no answer",
                proc,
            )
        finally:
            err = stop(proc)
        return err

    err = restart_and_say("ann-4", "bob-2")
    assert answers(ann) == ["re ann-1", "re ann-2", "re ann-3", "re ann-4"], err  # once, in order
    late, answer, live = answers(bob)
    assert late.startswith("You wrote this 2 hours ago") and answer == "re bob-first"
    assert live == "re bob-2"  # not late: received at once

    restart_and_say("ann-5", "bob-3")  # a third start: nothing is answered again
    assert answers(ann)[4:] == ["re ann-5"] and answers(bob)[3:] == ["re bob-3"]


def connections(side: Driver) -> int:
    """How many times a gateway has connected to the fake (synced, or opened the socket)."""
    return int(side.fake.syncs if side.name == "matrix" else side.fake.connections)
