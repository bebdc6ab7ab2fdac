"""Nearest-neighbour search over one person's vectors: the index choices, measured.

    .venv/bin/pip install -e '.[bench-embeddings]'   # usearch, hnswlib, sqlite-vec, sqlean-py
    .venv/bin/python bench/vector_index.py [--sizes 10000 100000] [--dim 384] [--queries 200]

For each size, one user's random unit vectors (384 dimensions: all-MiniLM-L6-v2's size;
latency does not depend on what the vectors mean) and the 200 nearest of each query:
- numpy: what Hermes runs (hermes/state/vectors.py `VectorDB.nearest`, from state.db,
  cache warm: the count/max probe, the matrix product, the top-k), and its cold load;
- sqlite-vec: a vec0 table with the user as partition key (through sqlean-py, a
  drop-in sqlite3 that can load extensions; the Python here cannot);
- usearch and hnswlib: an HNSW index per user (approximate), with recall@200 against
  the exact answer.
Reported: p50/p95 per query (ms), build time, and memory/disk size. A library that is
not installed is skipped.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text

from hermes.identity import new_user_id
from hermes.state import engine as eng
from hermes.state.db import SessionDB
from hermes.state.vectors import QueryVector

K = 200


def timed(fn: Callable[[Any], Any], queries: np.ndarray) -> tuple[list[float], list[Any]]:
    times, results = [], []
    for q in queries:
        started = time.perf_counter()
        results.append(fn(q))
        times.append((time.perf_counter() - started) * 1000)
    return times, results


def figures(times: list[float]) -> str:
    p95 = statistics.quantiles(times, n=20)[18]
    return f"p50 {statistics.median(times):6.2f} ms  p95 {p95:6.2f} ms"


def recall(found: list[Any], exact: list[set[int]]) -> float:
    return statistics.mean(
        len(set(map(int, f)) & e) / len(e) for f, e in zip(found, exact, strict=True)
    )


def hermes_numpy(vectors: np.ndarray, queries: np.ndarray) -> tuple[list[set[int]], list[str]]:
    """The real path: vectors stored in state.db, searched through VectorDB.nearest."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "state.db")
        user = db.people.ensure_user(new_user_id()).id
        chat = db.conversations.start_session(user, "bench", "k")
        started = time.perf_counter()
        with eng.reading(db.engine) as session:  # bulk rows, as a backfill leaves them
            conn = session.connection()
            conn.execute(
                text(
                    "INSERT INTO vector_model(id, model, dim, changed_at) VALUES (1, 'b', :d, '')"
                ),
                {"d": vectors.shape[1]},
            )
            conn.execute(
                text(
                    "INSERT INTO messages(id, session_id, user_id, platform, role, content, "
                    "created_at) VALUES (:i, :s, :u, 'bench', 'user', 'x', '2026-01-01')"
                ),
                [{"i": i + 1, "s": chat.id, "u": user} for i in range(len(vectors))],
            )
            conn.execute(
                text(
                    "INSERT INTO message_vectors(message_id, user_id, model, dim, vector) "
                    "VALUES (:i, :u, 'b', :d, :v)"
                ),
                [
                    {"i": i + 1, "u": user, "d": vectors.shape[1], "v": v.tobytes()}
                    for i, v in enumerate(vectors)
                ],
            )
            conn.execute(text("DELETE FROM embedding_queue"))
            session.commit()
        lines.append(f"  stored in {time.perf_counter() - started:.1f} s")
        conn = db.engine.connect()
        started = time.perf_counter()
        db.vectors.nearest(conn, user, QueryVector("b", queries[0].tolist()), K)
        lines.append(
            f"  cold load (state.db -> matrix) {1000 * (time.perf_counter() - started):.0f} ms"
        )
        times, found = timed(
            lambda q: db.vectors.nearest(conn, user, QueryVector("b", q), K).hits, queries
        )
        with eng.reading(db.engine) as session:
            size = (
                session.connection()
                .execute(text("SELECT sum(pgsize) FROM dbstat WHERE name LIKE '%message_vectors%'"))
                .scalar_one()
            )
        lines.insert(0, f"numpy (Hermes, exact)   {figures(times)}  state.db {size / 1e6:.0f} MB")
        conn.close()
        db.close()
    return [{mid - 1 for mid, _ in f} for f in found], lines


def sqlite_vec(vectors: np.ndarray, queries: np.ndarray, exact: list[set[int]]) -> list[str]:
    try:
        import sqlean
        import sqlite_vec as vec
    except ImportError:
        return ["sqlite-vec              skipped (pip install sqlite-vec sqlean-py)"]
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlean.connect(str(Path(tmp) / "v.db"))
        conn.enable_load_extension(True)
        vec.load(conn)
        conn.execute(
            f"CREATE VIRTUAL TABLE v USING vec0(user_id TEXT partition key, "
            f"embedding float[{vectors.shape[1]}] distance_metric=cosine)"
        )
        started = time.perf_counter()
        conn.executemany(
            "INSERT INTO v(rowid, user_id, embedding) VALUES (?, 'u1', ?)",
            ((i, v.tobytes()) for i, v in enumerate(vectors)),
        )
        conn.executemany(  # another user beside, as in a real state.db
            "INSERT INTO v(rowid, user_id, embedding) VALUES (?, 'u2', ?)",
            ((len(vectors) + i, v.tobytes()) for i, v in enumerate(vectors[:1000])),
        )
        conn.commit()
        build = time.perf_counter() - started
        sql = "SELECT rowid FROM v WHERE embedding MATCH ? AND k = ? AND user_id = 'u1'"
        times, found = timed(lambda q: [r[0] for r in conn.execute(sql, (q.tobytes(), K))], queries)
        conn.close()
        size = (Path(tmp) / "v.db").stat().st_size
    return [
        f"sqlite-vec (exact)      {figures(times)}  build {build:.1f} s  file {size / 1e6:.0f} MB"
        f"  recall {recall(found, exact):.3f}"
    ]


def usearch(vectors: np.ndarray, queries: np.ndarray, exact: list[set[int]]) -> list[str]:
    try:
        from usearch.index import Index
    except ImportError:
        return ["usearch                 skipped (pip install usearch)"]
    index = Index(ndim=vectors.shape[1], metric="cos", dtype="f32")
    started = time.perf_counter()
    index.add(np.arange(len(vectors)), vectors)
    build = time.perf_counter() - started
    times, found = timed(lambda q: index.search(q, K).keys, queries)
    return [
        f"usearch (HNSW)          {figures(times)}  build {build:.1f} s  "
        f"memory {index.memory_usage / 1e6:.0f} MB  recall {recall(found, exact):.3f}"
    ]


def hnswlib(vectors: np.ndarray, queries: np.ndarray, exact: list[set[int]]) -> list[str]:
    try:
        import hnswlib as hnsw
    except ImportError:
        return ["hnswlib                 skipped (pip install hnswlib)"]
    index = hnsw.Index(space="cosine", dim=vectors.shape[1])
    started = time.perf_counter()
    index.init_index(max_elements=len(vectors), ef_construction=200, M=16)
    index.add_items(vectors, np.arange(len(vectors)))
    index.set_ef(2 * K)
    build = time.perf_counter() - started
    times, found = timed(lambda q: index.knn_query(q, k=K)[0][0], queries)
    return [
        f"hnswlib (HNSW)          {figures(times)}  build {build:.1f} s  "
        f"recall {recall(found, exact):.3f}"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    for size in args.sizes:
        vectors = rng.standard_normal((size, args.dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        queries = vectors[rng.choice(size, args.queries)] + 0.5 * rng.standard_normal(
            (args.queries, args.dim)
        ).astype(np.float32)
        print(f"\n{size:,} vectors of one user, {args.dim} dimensions, top {K}")
        exact, lines = hermes_numpy(vectors, queries)
        for line in (
            lines
            + sqlite_vec(vectors, queries, exact)
            + usearch(vectors, queries, exact)
            + hnswlib(vectors, queries, exact)
        ):
            print(line)


if __name__ == "__main__":
    main()
