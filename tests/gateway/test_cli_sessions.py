"""`hermes sessions ...` and `hermes memory why` as real subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

from hermes.identity import owner_user_id
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.memory_log import MemoryEventRecord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.gateway.test_cli_memory import hermes


def write_jsonl(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n")
    return path


def test_import_list_search_show_export_round_trip(home: Path, tmp_path: Path) -> None:
    source = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"session_id": "a", "role": "user", "content": "We deployed the Rust API to Fly.io"},
            {"session_id": "a", "role": "assistant", "content": "The deploy went fine."},
            {
                "session_id": "b",
                "role": "user",
                "content": "서울에서 비빔밥을 먹었어요",
                "platform": "telegram",
            },
        ],
    )
    imported = hermes("sessions", "import", str(source))
    assert imported.returncode == 0 and "2 sessions, 3 messages" in imported.stdout
    listing = hermes("sessions", "list").stdout
    assert "telegram" in listing and "import" in listing
    found = json.loads(hermes("sessions", "search", "rust deploy", "--json", "--no-summary").stdout)
    assert found["count"] == 1 and "Rust API" in found["results"][0]["snippets"][0]
    korean = json.loads(hermes("sessions", "search", "비빔밥", "--json").stdout)
    assert korean["results"][0]["platform"] == "telegram"
    session_id = found["results"][0]["session_id"]
    shown = hermes("sessions", "show", session_id).stdout
    assert "We deployed the Rust API" in shown and "The deploy went fine." in shown
    exported = hermes("sessions", "export", "--all", "--format", "jsonl").stdout.splitlines()
    assert len(exported) == 3 and json.loads(exported[0])["content"]
    out = tmp_path / "out.jsonl"
    assert hermes("sessions", "export", "--all", "-o", str(out)).returncode == 0
    other = tmp_path / "other-home"
    assert hermes("sessions", "import", str(out), home=other).returncode == 0
    again = json.loads(hermes("sessions", "search", "rust", "--json", home=other).stdout)
    assert again["count"] == 1
    md = hermes("sessions", "export", session_id, "--format", "md").stdout
    assert md.startswith("# We deployed")


def test_bad_import_stores_nothing(home: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session_id": "a", "role": "user", "content": "ok"}\n{"role": "robot"}\n')
    result = hermes("sessions", "import", str(bad))
    assert (
        result.returncode == 1
        and "line 2" in result.stderr
        and "nothing was imported" in result.stderr
    )
    assert "import" not in hermes("sessions", "list").stdout


def test_show_refuses_other_users_sessions(home: Path) -> None:
    db = SessionDB.open(home)
    from hermes.identity import new_user_id

    stranger = db.people.ensure_user(new_user_id()).id
    chat = db.conversations.start_session(stranger, "telegram", "k")
    db.conversations.add_message(chat.id, NewMessage("user", "private"))
    result = hermes("sessions", "show", chat.id)
    assert result.returncode == 1 and "private" not in result.stdout
    db.close()


def test_prune(home: Path, tmp_path: Path) -> None:
    source = write_jsonl(
        tmp_path / "old.jsonl",
        [
            {
                "session_id": "x",
                "role": "user",
                "content": "old",
                "created_at": "2020-01-01T00:00:00",
            },
        ],
    )
    hermes("sessions", "import", str(source))
    assert "would delete 1" in hermes("sessions", "prune", "--older-than", "30", "--dry-run").stdout
    assert "deleted 1" in hermes("sessions", "prune", "--older-than", "30").stdout
    assert "deleted 0" in hermes("sessions", "prune", "--older-than", "30").stdout


def test_memory_writes_are_recorded_and_explained(home: Path) -> None:
    hermes("memory", "add", "-t", "user", "Lives in Busan")
    hermes("memory", "replace", "-t", "user", "Busan", "Lives in Seoul")
    why = hermes("memory", "why", "Seoul")
    assert why.returncode == 0
    assert "replace in user by user" in why.stdout and "- Lives in Busan" in why.stdout
    db = SessionDB.open(home)
    owner = owner_user_id(home)
    chat = db.conversations.start_session(owner, "telegram", "k")
    message_id = db.conversations.add_message(
        chat.id, NewMessage("user", "I love hiking in Jirisan")
    )
    db.memory_log.record_memory_event(
        MemoryEventRecord(owner, "user", "add", None, "Loves hiking", "agent", chat.id, message_id)
    )
    db.close()
    explained = hermes("memory", "why", "hiking").stdout
    assert f"session {chat.id} on telegram" in explained and "I love hiking in Jirisan" in explained
    assert hermes("memory", "why", "nothing like this").returncode == 1


def test_search_summaries_use_the_configured_auxiliary_model(
    home: Path, tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake_llm.base_url}\n  model: main-model\n  api_key_env: FAKE_LLM_KEY\n"
        "auxiliary:\n  model: cheap-model\n  session_search:\n    timeout: 5\n"
    )
    source = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"session_id": "a", "role": "user", "content": "Let's adopt a greyhound named Comet"},
        ],
    )
    hermes("sessions", "import", str(source))
    fake_llm.default = Reply(text="The user wants to adopt a greyhound called Comet.")
    result = json.loads(hermes("sessions", "search", "greyhound", "--json").stdout)
    assert result["results"][0]["summary"] == "The user wants to adopt a greyhound called Comet."
    assert fake_llm.requests[0]["model"] == "cheap-model"
    skipped = json.loads(hermes("sessions", "search", "greyhound", "--json", "--no-summary").stdout)
    assert "summary" not in skipped["results"][0] and len(fake_llm.requests) == 1
