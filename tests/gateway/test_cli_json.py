"""`--json` on every list and status command: the table's rows, parseable, ids whole."""

from __future__ import annotations

import json
from pathlib import Path

from hermes.identity import owner_user_id
from tests.fakes.openai_server import FakeOpenAI
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
    assert json.loads(gateway.stdout) == {
        "home": str(home),
        "backend": "sqlite",
        "running": False,
        "instances": [],
        "inbox": None,
    }  # the same keys as on PostgreSQL (tests/adapters/test_several_gateways.py)


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


def test_every_users_lists_name_the_same_people_in_the_table_and_the_json(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    """`memory status --all` and `sessions list --all`: a person made an admin before
    their first message (no memory, no session) and the owner, in both forms."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(f"llm:\n  base_url: {fake_llm.base_url}\n  model: m\n")
    assert hermes("chat", "-q", "hello").returncode == 0
    assert hermes("users", "role", "telegram:123", "admin").returncode == 0
    shown = json.loads(hermes("memory", "status", "--all", "--json").stdout)
    rows = hermes("memory", "status", "--all").stdout.splitlines()[1:]  # piped: tab rows
    assert {row.split("\t")[0] for row in rows} == set(shown) and len(shown) == 2
    sessions = json.loads(hermes("sessions", "list", "--all", "--json").stdout)
    assert [s["user_id"] for s in sessions] == [owner_user_id(home)]
    listed = hermes("sessions", "list", "--all").stdout.splitlines()
    assert listed[0].split("\t")[:2] == ["session", "user"] and len(listed) == 2
    both = hermes("sessions", "list", "--all", "--user", owner_user_id(home))
    assert both.returncode == 2 and "not both" in both.stderr
