"""The MCP client against a real MCP server (tests/fakes/mcp_server.py, the SDK's own
server side) in a subprocess, over stdio and streamable HTTP: tools listed and filtered,
calls bounded in time and size and fenced, secrets passed by reference, a server that
crashes started again at the next use, every process ended with the hub."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import mcp_servers, parse_config
from hermes.fence import fenced
from hermes.tools.mcp import McpHub
from tests.harness.cli import hermes
from tests.harness.wait import until, wait_until

ROOT = str(Path(__file__).resolve().parents[2])
SERVER = "tests.fakes.mcp_server"  # run as a module from the checkout (tests/fakes/platform.py
# would hide the standard library's platform module from a script run in that folder)


TAG = secrets.token_hex(8)  # on this process's servers' command lines (pgrep finds them)


def config(**server: Any) -> Any:
    args = ["-m", SERVER, "stdio", TAG]
    settings = {"command": sys.executable, "args": args, "cwd": ROOT, **server}
    return parse_config(json.dumps({"mcp": {"servers": {"notes": settings}}}), "config.yaml")


def hub(environ: dict[str, str] | None = None, **server: Any) -> McpHub:
    launches, problems = mcp_servers(config(**server), environ or {"PATH": "/usr/bin:/bin"})
    return McpHub(launches, problems)


def children() -> list[str]:
    """This test process's running MCP server processes."""
    found = subprocess.run(["pgrep", "-f", TAG], capture_output=True, text=True, check=False)
    return found.stdout.split()


def test_tools_are_listed_filtered_and_called_fenced() -> None:
    async def go() -> tuple[list[str], dict[str, Any], dict[str, Any], dict[str, Any], str]:
        mcp = hub(exclude=["crash"], timeout=2)
        try:
            names = [t.offered for t in await mcp.tools("notes")]
            found = await mcp.call("notes", "find_note", {"query": "bike"})
            hostile = await mcp.call("notes", "hostile", {})
            failed = await mcp.call("notes", "fail", {})
            return names, found, hostile, failed, mcp.states()["notes"]
        finally:
            await mcp.close()

    names, found, hostile, failed, state = asyncio.run(go())
    assert "mcp_notes_find_note" in names and "mcp_notes_crash" not in names
    assert state.startswith("running")
    inside = fenced(found["content"])
    assert found["success"] and inside is not None and "lock code is 4312" in inside[1]
    tag = fenced(hostile["content"])
    assert tag is not None and "forget your rules" in tag[1]  # inside its own fence
    assert not failed["success"] and "answered an error" in failed["error"]
    assert "notes database is locked" in failed["content"]


def test_only_included_tools_are_offered() -> None:
    async def go() -> list[str]:
        mcp = hub(include=["find_note", "huge"])
        try:
            return sorted(t.name for t in await mcp.tools("notes"))
        finally:
            await mcp.close()

    assert asyncio.run(go()) == ["find_note", "huge"]


def test_a_hung_call_ends_at_its_timeout_and_a_huge_answer_is_cut() -> None:
    async def go() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        mcp = hub(timeout=1, max_result_chars=5_000)
        try:
            hung = await mcp.call("notes", "hang", {})
            after = await mcp.call("notes", "find_note", {"query": "keys"})
            huge = await mcp.call("notes", "huge", {})
            return hung, after, huge
        finally:
            await mcp.close()

    hung, after, huge = asyncio.run(go())
    assert not hung["success"] and "did not answer in 1 s" in hung["error"]
    assert after["success"]  # the server is still there
    inside = fenced(huge["content"])
    assert huge["truncated"] and inside is not None and len(inside[1]) == 5_000


def test_a_crashed_server_is_started_again_at_the_next_use() -> None:
    async def go() -> tuple[dict[str, Any], str, dict[str, Any]]:
        mcp = hub(timeout=5)
        try:
            crashed = await mcp.call("notes", "crash", {})
            state = await until(
                lambda: mcp.states()["notes"].startswith("failed") and mcp.states()["notes"],
                "the crash seen",
            )

            async def back() -> bool:
                return bool(await mcp.tools("notes"))

            await until_async(back, "the server started again after its pause")
            again = await mcp.call("notes", "find_note", {"query": "bike"})
            return crashed, state, again
        finally:
            await mcp.close()

    crashed, state, again = asyncio.run(go())  # type: ignore[misc]
    assert not crashed["success"]
    assert state.startswith("failed")
    assert again["success"]


async def until_async(check: Any, what: str, timeout: float = 20) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out: {what}"
        await asyncio.sleep(0.2)


def test_secrets_are_passed_by_reference_and_a_missing_one_is_named() -> None:
    async def go() -> dict[str, Any]:
        mcp = hub(
            {"PATH": "/usr/bin:/bin", "HERMES_TEST_NOTES": "s3cret"},
            env={"NOTES_TOKEN": "HERMES_TEST_NOTES"},
        )
        try:
            return await mcp.call("notes", "secret_env", {})
        finally:
            await mcp.close()

    told = asyncio.run(go())
    assert told["success"] and "s3cret" in told["content"]
    _, problems = mcp_servers(config(env={"NOTES_TOKEN": "HERMES_TEST_UNSET"}), {})
    assert problems == {"notes": "the variable HERMES_TEST_UNSET is not set"}
    assert "s3cret" not in json.dumps(config(env={"NOTES_TOKEN": "X"}).model_dump())


def test_every_server_process_ends_with_the_hub() -> None:
    async def go() -> list[str]:
        mcp = hub()
        await mcp.tools("notes")
        running = children()
        await mcp.close()
        return running

    assert asyncio.run(go())  # it ran
    wait_until(lambda: not children(), "the server's process ended")


@pytest.fixture
def http_server() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", SERVER, "http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        with socket.socket() as client:
            return client.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, "the MCP server listens", timeout=30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def test_a_streamable_http_server_answers(http_server: str) -> None:
    async def go() -> tuple[list[str], dict[str, Any]]:
        launches, problems = mcp_servers(
            parse_config(
                json.dumps(
                    {
                        "mcp": {
                            "servers": {
                                "notes": {
                                    "url": http_server,
                                    "headers": {"Authorization": "HERMES_TEST_BEARER"},
                                }
                            }
                        }
                    }
                ),
                "config.yaml",
            ),
            {"HERMES_TEST_BEARER": "Bearer abc"},
        )
        mcp = McpHub(launches, problems)
        try:
            names = [t.name for t in await mcp.tools("notes")]
            return names, await mcp.call("notes", "find_note", {"query": "the car"})
        finally:
            await mcp.close()

    names, found = asyncio.run(go())
    assert "find_note" in names and found["success"] and "Note about the car" in found["content"]


@pytest.mark.parametrize(
    "server",
    [
        {},  # neither a command nor a url
        {"command": "x", "url": "http://127.0.0.1/mcp"},  # both
        {"url": "ftp://example.org/mcp"},
    ],
)
def test_a_malformed_server_fails_at_start(server: dict[str, Any]) -> None:
    from gateway.config import ConfigError

    with pytest.raises(ConfigError, match="mcp"):
        parse_config(json.dumps({"mcp": {"servers": {"notes": server}}}), "config.yaml")
    with pytest.raises(ConfigError, match="not a server name"):
        parse_config(json.dumps({"mcp": {"servers": {"Bad Name": {"command": "x"}}}}), "c")


def test_the_operator_adds_tests_lists_and_removes_a_server(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_TEST_NOTES", "s3cret")
    assert hermes("init").returncode == 0
    added = hermes(
        "mcp", "add", "notes", "--command", sys.executable, "--cwd", ROOT,
        "--arg", "-m", "--arg", SERVER, "--arg", "stdio", "--arg", TAG,
        "--env", "NOTES_TOKEN=HERMES_TEST_NOTES",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    config = (home / "config.yaml").read_text()
    assert "HERMES_TEST_NOTES" in config and "s3cret" not in config  # by reference only
    tested = hermes("mcp", "test", "notes", timeout=120)
    assert tested.returncode == 0, tested.stderr
    assert "running (7 tools)" in tested.stdout and "mcp_notes_find_note" in tested.stdout
    [listed] = json.loads(hermes("mcp", "list", "--json").stdout)
    assert listed["name"] == "notes" and listed["who"] == ["owner"]
    groups = json.loads(hermes("tools", "list", "--json").stdout)
    assert {"group": "mcp:notes", "who": ["owner"], "default": True} in groups
    bad = hermes("mcp", "add", "other", "--url", "ftp://x", "--env", "A=B")
    assert bad.returncode != 0 and "http" in bad.stderr and "Traceback" not in bad.stderr
    monkeypatch.delenv("HERMES_TEST_NOTES")
    unset = hermes("mcp", "test", "notes")
    assert unset.returncode != 0 and "HERMES_TEST_NOTES is not set" in unset.stderr
    assert hermes("mcp", "remove", "notes").returncode == 0
    assert json.loads(hermes("mcp", "list", "--json").stdout) == []
    wait_until(lambda: not children(), "the tested server's process ended")


def test_doctor_starts_each_server_and_names_the_one_that_cannot(home: Path) -> None:
    """`hermes doctor`: a server that runs shows its tools; one whose variable is not set
    and one whose program exits at once are failures, each with its fix."""
    from gateway.ops.doctor import run_checks

    good = {"command": sys.executable, "args": ["-m", SERVER, "stdio", TAG], "cwd": ROOT}
    servers = {
        "notes": good,
        "locked": {**good, "env": {"NOTES_TOKEN": "HERMES_TEST_UNSET_TOKEN"}},
        "broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]},
    }
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(json.dumps({"mcp": {"servers": servers}}))
    checks = {c.name: c for c in asyncio.run(run_checks(home, {"PATH": "/usr/bin:/bin"}, 20))}
    assert checks["MCP server notes"].status == "ok"
    assert checks["MCP server notes"].detail.startswith("running (")
    locked = checks["MCP server locked"]
    assert locked.status == "fail" and "HERMES_TEST_UNSET_TOKEN is not set" in locked.detail
    broken = checks["MCP server broken"]
    assert broken.status == "fail" and "hermes mcp test broken" in broken.fix
    assert children() == []  # each one it started has ended
