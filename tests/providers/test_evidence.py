"""The `evidence` provider: provenance that survives re-indexing (edits, deletions,
renames), facts that cannot exist without a live chunk, drafts for model output, the
tools, recall of verified facts, conversations as sources, two people kept apart, and a
second process indexing while the gateway writes turns."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.exc import DBAPIError

from hermes.providers.evidence import EvidenceProvider, chunk_text, index_paths
from hermes.state.db import SessionDB
from hermes.state.evidence import FILENAME, EvidenceError, EvidenceStore
from tests.harness.cli import hermes
from tests.harness.postgres import sqlite_only

ALICE, BOB = "u_00000000000000a1", "u_00000000000000b2"


@pytest.fixture(autouse=True)
def state(home: Path, database_url: str | None) -> Iterator[SessionDB]:
    """Every test on both backends unless it says why not: the store is the home's
    evidence.db beside SQLite, and the state database's evidence tables when the home
    is on PostgreSQL (config.yaml says so, for the CLI in another process too)."""
    home.mkdir(parents=True, exist_ok=True)
    if database_url is not None:
        (home / "config.yaml").write_text(yaml.safe_dump({"database": {"url": database_url}}))
    db = SessionDB.open(home, database_url)
    yield db
    db.close()


def bypassing(store: EvidenceStore, sql: str, params: Sequence[object] = ()) -> Any:
    """Run SQL on the store's own tables as a hand edit would, past the module's rules
    (what is left to hold is the schema's): the first row, if any."""
    with store._write() as conn:
        done = conn.execute(sql, params)
        return done.fetchone() if sql.startswith("SELECT") else None


def person(home: Path, user_id: str) -> EvidenceProvider:
    provider = EvidenceProvider()
    provider.initialize(
        "s_1", hermes_home=home, platform="cli", user_id=user_id, agent_context="primary"
    )
    return provider


def call(provider: EvidenceProvider, tool: str, **args: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(asyncio.run(provider.handle_tool_call(tool, args)))
    return result


def write_files(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"sub{i % 7}" / f"note{i:03d}.md"
        path.parent.mkdir(exist_ok=True)
        lines = [f"# Note {i}", f"Service s{i} listens on port {8000 + i}."]
        lines += [f"detail line {j} of note {i}" for j in range(60 if i % 10 == 0 else 5)]
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def first_chunk(provider: EvidenceProvider, path: Path) -> str:
    chunks, _ = provider.search(f"port {8000 + int(path.stem[4:])}", 50)
    return next(c.id for c in chunks if c.locator == str(path))


def test_chunks_keep_their_line_spans() -> None:
    text = "\n".join(f"line {i}" for i in range(1, 101)) + "\n" + "x" * 4000
    pieces = chunk_text(text)
    assert pieces[0][1:] == (1, 40) and pieces[1][1:] == (41, 80)
    assert all(len(p[0]) <= 1500 for p in pieces)
    assert pieces[-1][1] == pieces[-1][2] == 101  # a long line is cut into its own pieces


def test_reindexing_200_files_after_edits_deletions_and_renames_keeps_provenance(
    home: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    paths = write_files(docs, 200)
    (docs / "image.png").write_bytes(b"\x89PNG\0\0binary")
    (docs / "big.txt").write_text("y" * 3_000_000)
    alice = person(home, ALICE)
    first = index_paths(alice.store, ALICE, [docs])
    assert (first.indexed, first.skipped) == (200, 2)
    facts: dict[str, int] = {}
    for path in paths[:30]:  # facts on files to be edited, deleted, renamed and kept
        cid = first_chunk(alice, path)
        facts[path.name] = alice.store.add_fact(
            ALICE, f"{path.stem} is a service", [cid], status="verified"
        )
    edited, deleted, renamed, kept = paths[:10], paths[10:15], paths[15:20], paths[20:30]
    for path in edited:
        path.write_text(path.read_text().replace("listens on port", "now listens on port"))
        os.utime(path, (time.time() + 5, time.time() + 5))
    for path in deleted:
        path.unlink()
    for path in renamed:
        path.rename(path.with_name("renamed-" + path.name))
    again = index_paths(alice.store, ALICE, [docs])
    assert again.indexed == 10 + 5  # the edited files and the renamed ones (new sources)
    assert again.unchanged == 200 - 10 - 5 - 5  # not read again
    assert again.vanished == 10  # deleted and renamed away
    counts = alice.store.verify(ALICE)
    assert counts["orphan_facts"] == 0 and counts["orphan_artifacts"] == 0
    assert counts["stale_sources"] == 10
    flagged = {f.id for f in alice.store.facts(ALICE) if f.flagged}
    expected = {facts[p.name] for p in edited + deleted + renamed}
    assert flagged == expected  # exactly where sources changed
    for fact in alice.store.facts(ALICE):  # every fact still resolves to its text
        cited = alice.store.chunks(ALICE, fact.chunk_ids)
        assert cited and all(c.text for c in cited)
        assert all(c.stale for c in cited) == (fact.id in expected)
    # the kept files' facts are still recalled; stale chunks are not
    recalled = asyncio.run(alice.prefetch(f"port {8000 + 25}", session_id="s_1"))
    assert f"fact #{facts[kept[5].name]}" in recalled


def test_a_fact_cannot_exist_without_a_live_chunk_of_its_own_person(
    home: Path, tmp_path: Path
) -> None:
    [path] = write_files(tmp_path / "a", 1)
    alice, bob = person(home, ALICE), person(home, BOB)
    index_paths(alice.store, ALICE, [path])
    cid = first_chunk(alice, path)
    for cites in ([], ["c-no-such-chunk"]):
        with pytest.raises(EvidenceError, match="must cite at least one live chunk"):
            alice.store.add_fact(ALICE, "unsupported", cites)
    with pytest.raises(EvidenceError):
        bob.store.add_fact(BOB, "borrowed evidence", [cid])  # alice's chunk
    refused = call(bob, "evidence_add_fact", text="borrowed", chunk_ids=[cid])
    assert not refused["success"] and "live chunk" in refused["error"]
    fact = alice.store.add_fact(ALICE, "s0 listens on 8000", [cid])
    refused = (sqlite3.DatabaseError, DBAPIError)  # the schema itself holds the rules
    with pytest.raises(refused, match="at least one chunk"):
        bypassing(alice.store, "DELETE FROM {fact_chunks} WHERE fact_id = ?", (fact,))
    with pytest.raises(refused, match=r"(?i)foreign key"):
        bypassing(alice.store, "DELETE FROM {chunks} WHERE id = ?", (cid,))
    assert alice.store.facts(ALICE, ids=[fact])[0].chunk_ids == (cid,)  # nothing changed
    path.unlink()
    index_paths(alice.store, ALICE, [path])
    with pytest.raises(EvidenceError):  # a stale chunk cannot be cited anew
        alice.store.add_fact(ALICE, "s0 again", [cid])


def test_tools_drafts_recall_and_packs(home: Path, tmp_path: Path) -> None:
    [path] = write_files(tmp_path / "t", 1)
    alice = person(home, ALICE)
    index_paths(alice.store, ALICE, [path])
    found = call(alice, "evidence_search", query="which port does s0 listen on")
    assert found["chunks"][0]["where"].endswith("note000.md:1-40")
    cid = found["chunks"][0]["chunk_id"]
    added = call(alice, "evidence_add_fact", text="s0 listens on port 8000", chunk_ids=[cid])
    assert added["status"] == "draft"
    assert "fact #" not in asyncio.run(alice.prefetch("s0 port", session_id="s_1"))  # a draft
    alice.store.review_fact(ALICE, added["fact_id"], "verified")
    recalled = asyncio.run(alice.prefetch("s0 port", session_id="s_1"))
    assert f"fact #{added['fact_id']}: s0 listens on port 8000 (cites {cid})" in recalled
    assert f"[{cid} {path}:1-40]" in recalled
    built = call(alice, "evidence_context_pack", name="ports", query="s0 port")
    assert built["facts"][0]["fact_id"] == added["fact_id"]
    again = call(alice, "evidence_context_pack", name="ports")
    assert again["facts"] == built["facts"] and again["chunks"] == built["chunks"]
    assert not call(alice, "evidence_context_pack", name="nothing")["success"]
    assert not call(alice, "evidence_add_fact", text="x", chunk_ids="c1")["success"]


def test_conversation_turns_are_sources_and_people_are_apart(home: Path) -> None:
    alice, bob = person(home, ALICE), person(home, BOB)

    async def go() -> None:
        await alice.sync_turn(
            "내 서버 포트는 7443이야", "기억할게요", session_id="s_a", messages=[]
        )
        await alice.sync_turn("and the backup runs at 3am", "noted", session_id="s_a", messages=[])
        await bob.sync_turn("my port is 9999", "ok", session_id="s_b", messages=[])

    asyncio.run(go())
    chunks, _ = alice.search("서버 포트", 5)
    assert chunks and chunks[0].kind == "session" and "7443" in chunks[0].text
    assert len(alice.search("backup", 5)[0]) == 1
    assert alice.search("9999", 5)[0] == []  # bob's turn
    assert bob.search("7443", 5)[0] == []
    counts = alice.store.verify(ALICE)
    assert counts["sources"] == 1 and counts["chunks"] == 2


def test_verify_from_the_cli_exits_nonzero_on_an_orphan(home: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write_files(docs, 3)
    assert hermes("evidence", "index", str(docs)).returncode == 0
    assert hermes("evidence", "verify").returncode == 0
    owner_search = hermes("evidence", "search", "port 8001")
    assert "note001.md" in owner_search.stdout
    pack = hermes("evidence", "pack", "ports", "port 8001")  # read by a person
    assert pack.returncode == 0 and "note001.md" in pack.stdout and not pack.stdout.startswith("{")
    packed = json.loads(hermes("evidence", "pack", "ports", "--json").stdout)  # by a script
    assert packed["name"] == "ports" and packed["chunks"]
    store = EvidenceStore.at(home)  # damage made by hand, the module's rules bypassed
    bypassing(
        store,
        "INSERT INTO {facts}(user_id, text, created_at) SELECT user_id, 'orphan', '' "
        "FROM {sources} LIMIT 1",
    )
    result = hermes("evidence", "verify", "--json")
    assert result.returncode == 1 and json.loads(result.stdout)["orphan_facts"] == 1
    assert hermes("evidence", "facts", "--status", "nope").returncode == 2


def test_indexing_in_another_process_while_turns_are_written(home: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write_files(docs, 120)
    alice = person(home, ALICE)
    errors: list[BaseException] = []
    stop = threading.Event()

    def turns() -> None:
        n = 0
        while not stop.is_set():
            try:
                asyncio.run(alice.sync_turn(f"turn {n}", "ok", session_id="s_live", messages=[]))
            except BaseException as exc:
                errors.append(exc)
            n += 1

    writer = threading.Thread(target=turns)
    writer.start()
    env = dict(os.environ, HERMES_HOME=str(home))
    indexer = subprocess.run(
        [
            sys.executable,
            "-c",
            "from gateway.cli.main import main; main()",
            "evidence",
            "index",
            str(docs),
            "--user",
            ALICE,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    stop.set()
    writer.join()
    assert indexer.returncode == 0, indexer.stderr
    assert errors == []
    counts = alice.store.verify(ALICE)
    assert counts["sources"] == 121 and counts["orphan_facts"] == 0


@sqlite_only  # the scenario's app keeps its state in SQLite (the PostgreSQL app: below)
def test_through_the_app_turns_become_evidence_recalled_later(home: Path, fake_llm: Any) -> None:
    from gateway.pipeline.router import Router
    from tests.fakes.platform import FakeAdapter
    from tests.gateway.test_router import dm, scenario

    fake_llm.default = __import__("tests.fakes.openai_server", fromlist=["Reply"]).Reply(
        text="noted"
    )

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(dm("alice", "my staging server listens on port 7443"))
        await adapter.wait_for(1)
        await router.agent.memory.providers.drain(5)
        await adapter.deliver(dm("alice", "which port does staging listen on?"))
        await adapter.wait_for(2)

    scenario(home, fake_llm, body, memory={"provider": "evidence", "review_interval": 0})
    assert "## Evidence" in fake_llm.requests[0]["messages"][0]["content"]
    asked = fake_llm.requests[1]["messages"][-1]["content"]
    assert "<recalled-memory" in asked and "port 7443" in asked and "session s_" in asked


@sqlite_only  # about the file and its WAL (PostgreSQL's backup is pg_dump's: test_postgres)
def test_backup_snapshots_the_evidence_store_with_what_is_still_in_its_wal(
    home: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    write_files(docs, 20)
    alice = person(home, ALICE)
    index_paths(alice.store, ALICE, [docs])  # this process keeps its connection open
    assert (home / (FILENAME + "-wal")).exists()
    archive = tmp_path / "b.tar.gz"
    assert hermes("backup", "create", str(archive)).returncode == 0
    other = tmp_path / "restored"
    assert hermes("backup", "restore", str(archive), home=other).returncode == 0
    with sqlite3.connect(other / FILENAME) as raw:
        assert raw.execute("SELECT count(*) FROM sources").fetchone()[0] == 20
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_events_and_artifacts_keep_to_the_same_rules(home: Path, tmp_path: Path) -> None:
    """An event or a derived document (a drafted summary) needs a live chunk of its
    person; an artifact is a draft; a chunk either cites survives re-indexing, stale."""
    [path] = write_files(tmp_path / "e", 1)
    alice = person(home, ALICE)
    index_paths(alice.store, ALICE, [path])
    cid = first_chunk(alice, path)
    for cites in ([], ["c-unknown"]):
        with pytest.raises(EvidenceError):
            alice.store.add_artifact(ALICE, "summary", "drafted", cites)
    with pytest.raises(EvidenceError):
        alice.store.add_event(ALICE, "deployed", "c-unknown")
    with pytest.raises(EvidenceError):
        person(home, BOB).store.add_artifact(BOB, "summary", "borrowed", [cid])
    artifact = alice.store.add_artifact(ALICE, "summary", "s0 listens on 8000", [cid])
    alice.store.add_event(ALICE, "s0 deployed", cid)
    status = bypassing(alice.store, "SELECT status FROM {artifacts} WHERE id = ?", (artifact,))
    assert tuple(status) == ("draft",)
    path.write_text("# Note 0\nService s0 moved to port 9000.\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    report = index_paths(alice.store, ALICE, [path])
    assert report.staled == 1  # the cited chunk: kept, marked stale (uncited ones go)
    [kept] = alice.store.chunks(ALICE, [cid])
    assert kept.stale and "8000" in kept.text
    counts = alice.store.verify(ALICE)
    assert counts["artifacts"] == 1 and counts["orphan_artifacts"] == 0


def test_indexing_skips_secrets_and_bad_names_reports_them_and_never_aborts(
    home: Path, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    write_files(docs, 3)
    (docs / ".env").write_text("OPENAI_API_KEY=sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56\n")
    (docs / "deploy.key").write_text("not even a key, but named like one\n")
    (docs / "notes-ops.md").write_text("prod db: postgres://admin:S3cretPass@db:5432/prod\n")
    os.mkdir(os.fsencode(docs) + b"/caf\xe9-latin1")  # a folder name that is not UTF-8
    (Path(os.fsdecode(os.fsencode(docs) + b"/caf\xe9-latin1")) / "x.md").write_text("port 9\n")
    (docs / "loop").symlink_to(docs / "loop")  # a symlink to itself
    result = hermes("evidence", "index", str(docs), str(docs / "loop"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    shown = result.stdout + result.stderr
    assert "7 files: 3 indexed" in " ".join(shown.split()), shown
    for why in ("a secrets file", "holds a secret", "not valid UTF-8", "cannot be followed"):
        assert why in shown, shown
    searched = hermes("evidence", "search", "OPENAI_API_KEY S3cretPass", "--json").stdout
    assert "sk-proj" not in searched and "S3cretPass" not in searched
    assert "note001.md" in hermes("evidence", "search", "port 8001").stdout
