"""`hermes sessions ...` and `hermes memory why` as real subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

from hermes.identity import owner_user_id
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.memory_log import MemoryEventRecord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness.cli import hermes


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
    assert "No sessions" in hermes("sessions", "list").stdout


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
    source = write_jsonl(tmp_path / "old.jsonl", [OLD])
    hermes("sessions", "import", str(source))
    stranger = write_jsonl(tmp_path / "theirs.jsonl", [{**OLD, "session_id": "y"}])
    assert hermes("sessions", "import", str(stranger), "--user", OTHER).returncode == 0
    assert "would delete 1" in hermes("sessions", "prune", "--older-than", "30", "--dry-run").stdout
    unanswered = hermes("sessions", "prune", "--older-than", "30")
    assert unanswered.returncode == 1 and "--yes" in unanswered.stderr
    declined = hermes("sessions", "prune", "--older-than", "30", answer="n\n")
    assert declined.returncode == 1 and "nothing deleted" in declined.stdout
    confirmed = hermes("sessions", "prune", "--older-than", "30", answer="y\n")
    assert "deleted 1 session(s) of user" in confirmed.stdout  # the owner's only
    assert "deleted 0" in hermes("sessions", "prune", "--older-than", "30", "--yes").stdout
    everyone = hermes("sessions", "prune", "--older-than", "30", "--all", "--yes")
    assert "deleted 1 session(s) of every user" in everyone.stdout


OLD = {"session_id": "x", "role": "user", "content": "old", "created_at": "2020-01-01T00:00:00"}
OTHER = "u_00000000000000cd"


def test_import_keeps_ids_and_twice_changes_nothing(home: Path, tmp_path: Path) -> None:
    source = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"session_id": "trip", "role": "user", "content": "Book the Busan train"},
            {"session_id": "trip", "role": "assistant", "content": "Booked: KTX 9:00."},
            {"session_id": "trip", "role": "user", "content": "Book the Busan train"},
        ],
    )
    first = hermes("sessions", "import", str(source))
    assert "3 messages (1 new sessions, 0 messages already there)" in first.stdout
    again = hermes("sessions", "import", str(source))
    assert "0 messages (0 new sessions, 3 messages already there)" in again.stdout
    assert "trip" in hermes("sessions", "list", "--json").stdout  # the id was kept
    out = tmp_path / "out.jsonl"
    hermes("memory", "add", "Takes the KTX, never flies")
    exported = hermes("sessions", "export", "--all", "--with-memory", "-o", str(out))
    assert exported.returncode == 0 and out.stat().st_mode & 0o777 == 0o600
    assert '"type": "memory"' in out.read_text()
    # exported from this database and imported back: nothing new
    back = hermes("sessions", "import", str(out))
    assert "0 messages" in back.stdout and "0 entries added, 1 already there" in back.stdout
    # into another user: the id is another user's now, so a stable new one is used
    other = hermes("sessions", "import", str(out), "--user", OTHER)
    assert "3 messages (1 new sessions" in other.stdout and "1 entries added" in other.stdout
    twice = hermes("sessions", "import", str(out), "--user", OTHER)
    assert "0 messages (0 new sessions, 3 messages already there)" in twice.stdout
    shown = hermes("memory", "show", "--user", OTHER).stdout
    assert "Takes the KTX, never flies" in shown


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
        "auxiliary:\n  model: cheap-model\n  session_search:\n    timeout: 60\n"  # (loaded)
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


def test_search_reranks_with_the_search_model_when_asked(
    home: Path, tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """`search.rerank.enabled`: the search model puts the candidates in order before the
    sessions are chosen (here the one it names first wins), then summarizes them."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake_llm.base_url}\n  model: main-model\n  api_key_env: FAKE_LLM_KEY\n"
        "auxiliary:\n  model: cheap-model\n"
        "search:\n  rerank:\n    enabled: true\n    candidates: 5\n"
    )
    records = [
        {"session_id": "a", "role": "user", "content": "the dog needs a walk at noon"},
        {"session_id": "b", "role": "user", "content": "the car needs new tyres"},
    ]
    hermes("sessions", "import", str(write_jsonl(tmp_path / "in.jsonl", records)))
    plain = json.loads(hermes("sessions", "search", "needs", "--json", "--no-summary").stdout)
    last = plain["results"][-1]["session_id"]  # the fused order's second
    fake_llm.push(Reply(text="2"), Reply(text="first"), Reply(text="second"))
    result = json.loads(hermes("sessions", "search", "needs", "--json", "--limit", "1").stdout)
    assert [r["session_id"] for r in result["results"]] == [last]
    ranked = fake_llm.requests[0]
    assert ranked["model"] == "cheap-model" and "2. " in ranked["messages"][-1]["content"]


def test_bad_paths_formats_and_users_get_a_clear_message(home: Path, tmp_path: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)  # a home with nothing in it yet
    empty = hermes("sessions", "list")
    assert empty.returncode == 0 and str(home) in empty.stdout  # where it looked
    hermes("sessions", "import", str(write_jsonl(tmp_path / "a.jsonl", [OLD])))
    nowhere = hermes("sessions", "export", "--all", "-o", str(tmp_path / "no" / "x.jsonl"))
    assert nowhere.returncode == 2 and "cannot write" in nowhere.stderr
    fmt = hermes("sessions", "export", "--all", "--format", "pdf")
    assert fmt.returncode == 2 and "jsonl or md" in fmt.stderr
    nobody = hermes("sessions", "export", "--all", "--user", "u_00000000000000ff")
    assert nobody.returncode == 1 and str(home) in nobody.stderr
    outputs = nowhere.stderr + fmt.stderr + nobody.stderr
    assert "Traceback" not in outputs
