"""Hermetic by default: a temp HERMES_HOME, no credentials, no network beyond loopback."""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from hermes.state.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI
from tests.harness.postgres import BACKENDS, ScratchServer, start_test_server

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The many `hermes` subprocesses compile the same modules: let the first one cache the
# bytecode (an environment may forbid it, which made each CLI test pay ~1 s of compiling)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# what gateway/config.py `quiet_vendor_sdks` does for a real process, for the tests that
# make providers without it (mem0ai reads these once, at import)
os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="hermes-test-mem0-"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The multi-process tests (marked slow) first: idle workers take queued tests from
    busy ones, so the suite then ends on short tests rather than waiting for a long one
    that started last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


_CREDENTIAL_HINTS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "hermes_home"
    monkeypatch.setenv("HERMES_HOME", str(home))
    for name in list(os.environ):
        if any(hint in name.upper() for hint in _CREDENTIAL_HINTS) or name in _PROXY_VARS:
            monkeypatch.delenv(name, raising=False)
    real_connect = socket.socket.connect

    def guarded_connect(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
                raise RuntimeError(f"tests must not use the network (connect to {host})")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    yield home


@pytest.fixture
def home(hermetic: Path) -> Path:
    return hermetic


# -- the two backends of state.db ---------------------------------------------------------
# A test that takes `db` (or `database_url`) runs on both; one about a file (the flock, the
# format, SQLite's pragmas) says `@sqlite_only`.
@pytest.fixture(scope="session")
def postgres() -> Iterator[ScratchServer]:
    server = start_test_server()
    yield server
    server.drop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for SQLite (state.db in the home); for PostgreSQL a database of the test's
    own, as the product leaves one it has opened (migrated, empty)."""
    if backend == "sqlite":
        yield None
        return
    server: ScratchServer = request.getfixturevalue("postgres")
    name, url = server.migrated()
    yield url
    server.drop_database(name)


@pytest.fixture
def db(home: Path, database_url: str | None) -> Iterator[SessionDB]:
    """state.db on the backend under test (SQLite, or a PostgreSQL database of its own)."""
    database = SessionDB.open(home, database_url)
    yield database
    database.close()


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


# Under CI every test runs: a test that would skip (no way to mount a tmpfs, no
# systemd-analyze) fails instead, saying what it needs, unless the machine's operator
# accepts that skip by name: HERMES_TEST_MAY_SKIP="cannot mount,systemd-analyze" (words of
# the skip's reason). A silent skip would let CI pass without checking it.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not (report.skipped and os.environ.get("CI")) or hasattr(report, "wasxfail"):
        return
    reason = (
        str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    )
    accepted = [w.strip() for w in os.environ.get("HERMES_TEST_MAY_SKIP", "").split(",")]
    if any(word and word in reason for word in accepted):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} would be skipped under CI ({reason}). Give this machine what the "
        'test needs, or accept the skip by name: HERMES_TEST_MAY_SKIP="<words of the reason>"'
    )
