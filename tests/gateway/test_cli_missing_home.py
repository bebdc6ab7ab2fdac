"""Commands that only show what is there never make a home: on a missing one they say
where they looked, and leave nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.cli import hermes

READ_ONLY = [
    ("memory", "status"),
    ("memory", "show"),
    ("memory", "why", "anything"),
    ("memory", "pending"),
    ("memory", "providers"),
    ("sessions", "list"),
    ("sessions", "search", "anything"),
    ("users", "list"),
    ("pairing", "list"),
    ("reminders", "list"),
    ("gateway", "status"),
    ("scheduler", "status"),
]


@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_a_read_only_command_on_a_missing_home_names_it_and_makes_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    home = tmp_path / "not-made"
    done = hermes(*args, home=home)
    assert done.returncode == 2, done.stdout + done.stderr
    assert str(home) in done.stderr.replace("\n", "")
    assert "Traceback" not in done.stderr
    assert not home.exists()
