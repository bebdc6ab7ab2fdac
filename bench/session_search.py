"""Full-text search at scale: build a big state.db, then time the FTS stage of searches.

    .venv/bin/python bench/session_search.py [--messages 1000000] [--sessions 10000]
        [--users 100] [--queries 2000] [--db PATH] [--json] [--hybrid 384]
        [--postgres postgresql://USER@HOST/EMPTY_DB]

Synthetic text: English with a Zipf-distributed vocabulary (common words plus a long
tail of rarer ones), 10 % Korean and 5 % Chinese messages. Reports insert throughput
(with both FTS indexes maintained by triggers), database size, and p50/p95/p99 of
SessionDB.search (the ranked message search the session_search tool runs first) for
2-4-word queries of random users. With --db and an existing file, the build is skipped.

--postgres URL (an empty database) builds the same messages there too, indexes them
(the search terms PostgreSQL keeps: reported as index build throughput) and runs the
same queries, so both backends are measured in one run on one machine. A database an
earlier run built is searched as it is (with an existing --db too, both draw the same
queries).

--hybrid DIM also gives every message a vector through the real store path
(VectorDB.activate queues them, VectorDB.store saves them; random unit vectors stand in
for a model, whose own speed bench/locomo_recall.py reports), then times hybrid searches
(a query vector fused with the lexical lists) of --active-users people (their matrices
in the cache, as for the people talking to a gateway), and one cold matrix load.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from hermes.identity import new_user_id
from hermes.state import postgres
from hermes.state.db import SessionDB
from hermes.state.models import utcnow
from hermes.state.search import SearchScope

COMMON = """time person year way day thing man world life hand part child eye woman place
work week case point government company number group problem fact be have do say get make
go know take see come think look want give use find tell ask work seem feel try leave call
good new first last long great little own other old right big high different small large
next early young important few public bad same able project deploy server database api
meeting budget travel trip dinner coffee weekend family birthday doctor school garden book
movie music guitar piano painting hiking running cooking recipe kitchen car train flight
hotel beach mountain city office laptop phone email message report review release bug fix
test build docker kubernetes python rust golang javascript typescript react postgres redis
backup invoice payment salary contract lawyer apartment rent move kids dog cat vacation""".split()
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "shi",
    "ven",
    "dor",
    "pla",
    "qu",
    "zen",
    "bri",
    "tor",
    "gal",
    "mon",
    "fex",
    "lin",
    "sar",
    "vio",
    "ped",
    "xan",
    "cor",
    "hul",
]
KOREAN = [
    "서울",
    "부산",
    "회의",
    "프로젝트",
    "배포",
    "데이터베이스",
    "점심",
    "저녁",
    "여행",
    "주말",
    "가족",
    "생일",
    "병원",
    "학교",
    "정원",
    "책",
    "영화",
    "음악",
    "기타",
    "등산",
    "요리",
    "비빔밥",
    "김치찌개",
    "커피",
    "회사",
    "보고서",
    "출장",
    "계약",
    "이사",
    "휴가",
]
CHINESE = "我们今天明天去北京上海开会项目部署数据库午饭晚饭旅行周末家人生日医院学校花园书电影音乐"


def vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    rare = {"".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))) for _ in range(size * 2)}
    return COMMON + sorted(rare)[: size - len(COMMON)]


class TextGen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.vocab = vocabulary(rng)
        weights = [1 / (rank + 1) ** 1.07 for rank in range(len(self.vocab))]
        total = sum(weights)
        self.cumulative = []
        running = 0.0
        for weight in weights:
            running += weight / total
            self.cumulative.append(running)

    def words(self, k: int) -> list[str]:
        return self.rng.choices(self.vocab, cum_weights=self.cumulative, k=k)

    def message(self) -> str:
        roll = self.rng.random()
        if roll < 0.10:
            return " ".join(self.rng.choices(KOREAN, k=self.rng.randint(3, 10))) + "요."
        if roll < 0.15:
            return "".join(self.rng.choices(CHINESE, k=self.rng.randint(8, 30))) + "。"
        return " ".join(self.words(self.rng.randint(6, 30))).capitalize() + "."


def build(
    path: Path,
    messages: int,
    sessions: int,
    users: int,
    rng: random.Random,
    *,
    url: str | None = None,
) -> dict[str, Any]:
    db = SessionDB(path, url=url)
    gen = TextGen(rng)
    user_ids = [db.people.ensure_user(new_user_id()).id for _ in range(users)]
    start = utcnow() - timedelta(days=365)
    chats = []
    for i in range(sessions):
        user = user_ids[i % users]
        chat = db.conversations.start_session(
            user,
            rng.choice(["cli", "telegram", "discord", "slack"]),
            f"k{i}",
            started_at=start + timedelta(minutes=i * 50),
        )
        chats.append((chat.id, user, chat.platform))
    per_session = messages // sessions
    began = time.perf_counter()
    batch: list[dict[str, Any]] = []
    for index, (session_id, user, platform) in enumerate(chats):
        for j in range(per_session):
            batch.append(
                {
                    "session_id": session_id,
                    "user_id": user,
                    "platform": platform,
                    "role": "user" if j % 2 == 0 else "assistant",
                    "content": gen.message(),
                    "created_at": start + timedelta(minutes=index * 50 + j),
                    "token_count": 0,
                }
            )
        if len(batch) >= 20_000:
            db.upkeep.bulk_insert_messages(batch)
            batch = []
    if batch:
        db.upkeep.bulk_insert_messages(batch)
    seconds = time.perf_counter() - began
    report = {
        "insert_seconds": round(seconds, 1),
        "insert_rows_per_second": round(messages / seconds),
    }
    if url is not None:  # the search terms, built from the backlog the inserts filled
        began = time.perf_counter()
        indexed = postgres.index_backlog(db.engine)
        seconds = time.perf_counter() - began
        report |= {
            "index_seconds": round(seconds, 1),
            "indexed_per_second": round(indexed / seconds),
        }
    db.upkeep.maintenance()  # searched as the daily upkeep leaves the database
    db.close()
    return report


def measure(path: Path, queries: int, rng: random.Random, url: str | None = None) -> dict[str, Any]:
    db = SessionDB(path, url=url)
    gen = TextGen(random.Random(11))
    with db.engine.connect() as conn:
        users = [row[0] for row in conn.exec_driver_sql("SELECT id FROM users")]
    for _ in range(50):  # warm the page cache the way a running gateway would have it
        db.conversations.search(SearchScope(rng.choice(users)), " ".join(gen.words(3)))
    timings, hits = [], 0
    for i in range(queries):
        if i % 10 == 0:
            query = " ".join(rng.sample(KOREAN, 2))
        elif i % 20 == 1:
            query = "".join(rng.choices(CHINESE, k=3))
        else:
            query = " ".join(gen.words(rng.randint(2, 4)))
        started = time.perf_counter()
        found = db.conversations.search(SearchScope(rng.choice(users)), query, limit=60)
        timings.append((time.perf_counter() - started) * 1000)
        hits += bool(found)
    messages = db.conversations.count_messages()
    if url is None:
        size = path.stat().st_size
    else:
        with db.engine.connect() as conn:
            size = int(
                conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar_one()
            )
    db.close()
    cuts = statistics.quantiles(timings, n=100, method="inclusive")
    return {
        "messages": messages,
        "db_size_mb": round(size / 2**20, 1),
        "queries": queries,
        "queries_with_hits": hits,
        "p50_ms": round(cuts[49], 2),
        "p95_ms": round(cuts[94], 2),
        "p99_ms": round(cuts[98], 2),
    }


def measure_append(path: Path, url: str | None = None, count: int = 2000) -> dict[str, Any]:
    """The turn's hot path: one message stored per call (with its session's counters and,
    on PostgreSQL, its place on the search backlog), as a gateway stores them."""
    from hermes.state.conversations import NewMessage

    db = SessionDB(path, url=url)
    user = db.people.ensure_user(new_user_id()).id
    chat = db.conversations.start_session(user, "cli", "append-bench")
    began = time.perf_counter()
    for n in range(count):
        db.conversations.add_messages(chat.id, [NewMessage("user", f"appended message {n}")])
    seconds = time.perf_counter() - began
    db.close()
    return {"append_per_second": round(count / seconds)}


def embed(path: Path, dim: int) -> dict[str, Any]:
    import numpy as np

    db = SessionDB(path)
    rng = np.random.default_rng(3)
    began = time.perf_counter()
    db.vectors.activate("synthetic")
    stored = 0
    while batch := db.vectors.pending(5000):
        vectors = rng.standard_normal((len(batch), dim)).astype(np.float32)
        stored += db.vectors.store("synthetic", list(zip(batch, vectors, strict=True)))[0]
    seconds = time.perf_counter() - began
    db.close()
    return {
        "vectors_stored": stored,
        "vector_store_per_second": round(stored / seconds),
        "db_size_with_vectors_mb": round(path.stat().st_size / 2**20, 1),
    }


def measure_hybrid(
    path: Path, queries: int, dim: int, active: int, rng: random.Random
) -> dict[str, Any]:
    import numpy as np

    from hermes.state.vectors import QueryVector

    db = SessionDB(path)
    db.vectors.cache.budget = 4 << 30
    gen = TextGen(random.Random(13))
    vec_rng = np.random.default_rng(5)
    with db.engine.connect() as conn:
        users = [row[0] for row in conn.exec_driver_sql("SELECT id FROM users")][:active]
    started = time.perf_counter()
    probe = QueryVector("synthetic", vec_rng.standard_normal(dim).tolist())
    db.conversations.search(SearchScope(users[0]), "coffee", vector=probe)
    cold = (time.perf_counter() - started) * 1000
    for user in users[1:]:
        db.conversations.search(SearchScope(user), "coffee", vector=probe)
    timings = []
    for _ in range(queries):
        query = " ".join(gen.words(rng.randint(2, 4)))
        vector = QueryVector("synthetic", vec_rng.standard_normal(dim).tolist())
        started = time.perf_counter()
        db.conversations.search(SearchScope(rng.choice(users)), query, limit=60, vector=vector)
        timings.append((time.perf_counter() - started) * 1000)
    db.close()
    cuts = statistics.quantiles(timings, n=100, method="inclusive")
    return {
        "hybrid_users": len(users),
        "hybrid_cold_first_search_ms": round(cold, 1),
        "hybrid_p50_ms": round(cuts[49], 2),
        "hybrid_p95_ms": round(cuts[94], 2),
        "hybrid_p99_ms": round(cuts[98], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--db", type=Path)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--hybrid", type=int, metavar="DIM", help="also time hybrid search")
    parser.add_argument("--active-users", type=int, default=10)
    parser.add_argument("--postgres", metavar="URL", help="also measure PostgreSQL (empty db)")
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "state.db"
        report: dict[str, Any] = {}
        if not path.exists():
            report |= build(path, args.messages, args.sessions, args.users, rng)
        report |= measure(path, args.queries, rng)
        report |= measure_append(path)
        if args.hybrid:
            report |= embed(path, args.hybrid)
            report |= measure_hybrid(path, args.queries, args.hybrid, args.active_users, rng)
        if args.postgres:
            same = random.Random(7)  # the same messages, users and queries
            built: dict[str, Any] = {}
            if postgres.is_empty(args.postgres):  # else built by an earlier run, as --db
                built = build(
                    path, args.messages, args.sessions, args.users, same, url=args.postgres
                )
            found = measure(path, args.queries, same, args.postgres)
            found |= measure_append(path, args.postgres)
            report |= {f"postgresql_{key}": value for key, value in (built | found).items()}
    if args.json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        print(f"{key:24} {value}")


if __name__ == "__main__":
    main()
