"""The `hermes` command itself."""

from __future__ import annotations

from importlib import metadata

from tests.gateway.test_cli_memory import hermes


def test_version_and_bare_help() -> None:
    shown = hermes("--version")
    assert shown.returncode == 0 and shown.stdout.strip() == (
        f"hermes {metadata.version('hermes-gateway')}"
    )
    bare = hermes()
    assert "Usage" in bare.stdout + bare.stderr and "memory" in bare.stdout + bare.stderr
