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


def test_show_why_undo_import_and_backup_speak_json_too(home: Path, tmp_path: Path) -> None:
    owner = owner_user_id(home)
    assert hermes("memory", "add", "Lives in Lisbon").returncode == 0
    shown = json.loads(hermes("memory", "show", "--json").stdout)
    assert shown["memory"]["entries"] == ["Lives in Lisbon"] and shown["user"]["entries"] == []
    why = json.loads(hermes("memory", "why", "Lisbon", "--json").stdout)
    assert [(c["action"], c["after"], c["actor"]) for c in why] == [
        ("add", "Lives in Lisbon", "user")
    ]
    assert json.loads(hermes("memory", "why", "Oslo", "--json").stdout) == []
    undone = json.loads(hermes("memory", "undo", "--json").stdout)
    assert undone["done"] is True and "Undid" in undone["message"]
    person = json.loads(hermes("users", "show", owner, "--json").stdout)
    assert person["id"] == owner and person["accounts"][0]["platform"] == "cli"

    source = tmp_path / "in.jsonl"
    line = {"session_id": "s1", "role": "user", "content": "hello there"}
    source.write_text(json.dumps(line) + "\n")
    imported = json.loads(hermes("sessions", "import", str(source), "--json").stdout)
    assert imported["sessions"] == 1 and imported["messages_stored"] == 1
    session = json.loads(hermes("sessions", "list", "--json").stdout)[0]["session_id"]
    messages = json.loads(hermes("sessions", "show", session, "--json").stdout)
    assert [m["content"] for m in messages] == ["hello there"]

    archive = tmp_path / "b.tar.gz"
    made = json.loads(hermes("backup", "create", str(archive), "--json").stdout)
    assert made["path"] == str(archive) and made["files"] > 0 and archive.exists()
