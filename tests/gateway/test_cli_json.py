"""`--json` on every list and status command: the table's rows, parseable, ids whole."""

from __future__ import annotations

import json
from pathlib import Path

from hermes.identity import owner_user_id
from tests.harness.cli import hermes


def test_list_and_status_commands_speak_json(home: Path) -> None:
    assert hermes("memory", "add", "Lives in Lisbon").returncode == 0
    owner = owner_user_id(home)

    users = json.loads(hermes("users", "list", "--json").stdout)
    assert [u["user_id"] for u in users] == [owner] and users[0]["accounts"] == ["cli:local"]
    memory = json.loads(hermes("memory", "status", "--json").stdout)
    (store, profile) = memory[owner]
    assert (store["target"], store["used"], store["entries"]) == ("memory", 15, 1)
    assert profile["target"] == "user" and profile["limit"] == 1375
    everyone = json.loads(hermes("memory", "status", "--all", "--json").stdout)
    assert set(everyone) == {owner}
    assert json.loads(hermes("sessions", "list", "--json").stdout) == []
    assert json.loads(hermes("pairing", "list", "--json").stdout) == []
    jobs = json.loads(hermes("scheduler", "status", "--json").stdout)
    assert {j["id"] for j in jobs} >= {"consolidation_check", "maintenance"}
    assert all(isinstance(j["every"], float) for j in jobs)
    gateway = hermes("gateway", "status", "--json")
    assert gateway.returncode == 1
    assert json.loads(gateway.stdout) == {"home": str(home), "running": False, "last": None}
