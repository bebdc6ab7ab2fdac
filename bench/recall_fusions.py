"""What else was tried for hybrid recall, and why it was not adopted: alternative fusions
of the same two rankings, the per-question signals a fusion could weigh them by, and
three changes to what is searched (docs/benchmarks.md, "Recall in other words").

    .venv/bin/python bench/recall_fusions.py --embeddings http://127.0.0.1:8765/v1 \\
        --locomo ../shared/bench-data/locomo-dev.json [--save lists.json | --load lists.json]

Every set of bench/recall_ablation.py is stored and embedded once; for each question the
shipped lexical ranking (200 hits, scores), the vector ranking as search fuses it (the
person's nearest 200, a question's reply included, with the median and spread of their
similarities and the script trust) and the vector similarity of the lexical ranking's
first 50 are kept (`--save` writes them, `--load`
reads them back, so the fusions below run in seconds). Then, recall_any@5 per set:
- `fusions`: the shipped `fuse_trusted` (called as search calls it), reciprocal rank
  fusion, the oracle (per question, the better of the two lists: what any fusion of these
  lists could at most reach), and the alternatives tried on 2026-12-03;
- `signals`: for the questions where exactly one list finds an answer in its top 5, how
  well each per-question quantity tells "the vectors are right" from "the words are
  right" (the area under the ROC curve: 0.5 is chance; below 0.5 the reverse);
- `searched`: pseudo-relevance feedback (the best messages' rarest other words searched
  too, fused by rank), the question's content words alone embedded (not the question),
  and LoCoMo with each turn's speaker name indexed as part of its text.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import recall_ablation as ra  # bench/recall_ablation.py (this folder is on sys.path)
from sqlalchemy import text

from hermes.state import engine as eng
from hermes.state.search import (
    STOPWORDS,
    MessageHit,
    Neighbours,
    SearchScope,
    commitment,
    fuse,
    fuse_trusted,
    parse_query,
    quote,
    scope_token,
    vector_ranking,
)

CUT = 5
PRF = (3, 5, 0.5)  # best messages read, words taken, weight of their ranking
_WORD = re.compile(r"[^\W\d_]{3,}")


@dataclass
class Lists:
    """One question's rankings, as stored by `collect`."""

    group: str
    query: str
    answers: list[int]
    lex: list[tuple[int, float]]
    vec: list[tuple[int, float]]
    median: float
    spread: float
    trust: float
    lexsim: dict[int, float]  # vector similarity of the lexical ranking's first 50
    content_vec: list[int]  # nearest messages to the question's content words alone
    prf: list[int]  # lexical ranking with pseudo-relevance feedback


def collect(embeddings: tuple[str, str], locomo: list[dict[str, Any]]) -> dict[str, Any]:
    sets: dict[str, ra.Build] = {
        "paraphrase/person": ra.paraphrase_set("person", locomo),
        "paraphrase/pooled": ra.paraphrase_set("pooled", locomo),
        "paraphrase/pooled+locomo": ra.paraphrase_set("pooled+locomo", locomo),
        "locomo/tune": ra.locomo_set(locomo[: ra.TUNE]),
        "locomo/held-out": ra.locomo_set(locomo[ra.TUNE :]),
        "cjk": ra.cjk_set,
    }
    out: dict[str, Any] = {"lists": {}, "named": {}}
    for name, build in sets.items():
        out["lists"][name] = [vars(row) for row in _lists_of(build, embeddings)]
        print(f"  {name}: {len(out['lists'][name])} questions", flush=True)
    halves = {"locomo/tune": locomo[: ra.TUNE], "locomo/held-out": locomo[ra.TUNE :]}
    for name, samples in halves.items():
        out["named"][name] = _with_speaker_names(samples)
    return out


def _lists_of(build: ra.Build, embeddings: tuple[str, str]) -> list[Lists]:
    import numpy as np

    rows = []
    with ra.stored(build, embeddings) as (db, questions, hybrid):
        for q in questions:
            scope = SearchScope(q.user)
            vector = hybrid.vector(q.query)
            content = " ".join(parse_query(q.query).words) or q.query
            lex = db.conversations.search(scope, q.query, 200)
            with eng.reading(db.engine) as session:
                conn = session.connection()
                near = db.vectors.nearest(conn, q.user, vector, 200)
                # the vector ranking as search fuses it (a question's reply included)
                ranked = vector_ranking(conn, scope, near, parse_query(q.query).terms)
                by_content = db.vectors.nearest(conn, q.user, hybrid.vector(content), CUT)
                ids, matrix = db.vectors.cache.matrix(conn, q.user, vector.model)
            unit = np.asarray(vector.values, dtype=np.float32)
            unit /= np.linalg.norm(unit)
            row_of = {int(i): k for k, i in enumerate(ids)}
            lexsim = {
                h.message_id: float(matrix[row_of[h.message_id]] @ unit)
                for h in lex[:50]
                if h.message_id in row_of
            }
            rows.append(
                Lists(
                    q.group,
                    q.query,
                    sorted(q.answers),
                    [(h.message_id, h.score) for h in lex],
                    [(h.message_id, h.score) for h in ranked],
                    near.median,
                    near.spread,
                    near.trust,
                    lexsim,
                    [m for m, _ in by_content.hits],
                    _feedback(db, scope, q.query, lex),
                )
            )
    return rows


def _feedback(db: Any, scope: SearchScope, query: str, lex: list[MessageHit]) -> list[int]:
    """Pseudo-relevance feedback: of the words of the best PRF[0] messages that the
    question lacks, the PRF[1] with the most IDF summed over those messages (IDF over the
    person's messages, as the word index computes it) are searched as a second
    question; the two rankings fused by rank, the second weighted PRF[2]."""
    read, taken, weight = PRF
    asked = {w.casefold() for w in parse_query(query).words}
    token = scope_token(scope.user_id)
    score: dict[str, float] = {}
    with eng.reading(db.engine) as session:
        conn = session.connection()
        total = _fts_count(conn, f"scope : {token}")
        for hit in lex[:read]:
            for word in set(_WORD.findall(hit.content.casefold())):
                if word in STOPWORDS or word in asked:
                    continue
                n = _fts_count(conn, f"scope : {token} AND {quote(word)}")
                score[word] = score.get(word, 0.0) + math.log(1 + (total - n + 0.5) / (n + 0.5))
    words = sorted(score, key=lambda w: (-score[w], w))[:taken]
    if not words:
        return [h.message_id for h in lex[:CUT]]
    second = db.conversations.search(scope, " ".join(words), 50)
    fused: dict[int, float] = {}
    for hits, w in ((lex[:50], 1.0), (second, weight)):
        for rank, hit in enumerate(hits):
            fused[hit.message_id] = fused.get(hit.message_id, 0.0) + w / (60 + rank + 1)
    return sorted(fused, key=lambda m: (-fused[m], -m))[:CUT]


def _fts_count(conn: Any, match: str) -> int:
    sql = "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH :q"
    return int(conn.execute(text(sql), {"q": match}).scalar_one())


def _with_speaker_names(samples: list[dict[str, Any]]) -> float:
    """Lexical recall@5 on LoCoMo with each turn stored as "Name: text"."""
    named = json.loads(json.dumps(samples))
    for sample in named:
        for key, turns in sample["conversation"].items():
            if re.fullmatch(r"session_\d+", key) and isinstance(turns, list):
                for turn in turns:
                    turn["text"] = f"{turn['speaker']}: {turn.get('text', '')}"

    def build(db: Any) -> list[ra.Question]:
        return ra.locomo_set(named)(db)

    found = []
    with ra.stored(build, None) as (db, questions, _):
        for q in questions:
            hits = db.conversations.search(SearchScope(q.user), q.query, CUT)
            found.append(any(h.message_id in q.answers for h in hits))
    return sum(found) / len(found)


# fusions: each takes one question's Lists and returns message ids, best first

Fusion = Callable[[Lists], list[int]]


def _hits(pairs: list[tuple[int, float]]) -> list[MessageHit]:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [MessageHit(mid, "", "user", "", at, score) for mid, score in pairs]


def shipped(q: Lists) -> list[int]:
    nearest = Neighbours(q.vec, q.median, q.spread, q.trust)
    return [h.message_id for h in fuse_trusted(_hits(q.lex), _hits(q.vec), nearest)]


def lexical(q: Lists) -> list[int]:
    return [m for m, _ in q.lex]


def vector(q: Lists) -> list[int]:
    return [m for m, _ in q.vec]


def rank_fusion(q: Lists) -> list[int]:
    return [h.message_id for h in fuse([_hits(q.lex), _hits(q.vec)])]


def weighted(w_lex: Callable[[Lists], float], w_vec: Callable[[Lists], float]) -> Fusion:
    """The shipped fusion's form (each list's scores relative to its 11th, summed with
    weights) with other weights."""

    def run(q: Lists) -> list[int]:
        # fuse_trusted multiplies each list's commitment by `coverage` (words) and the
        # trust (vectors): those factors are set so that the products are wl and wv
        wl, wv = w_lex(q), w_vec(q)
        base_l = commitment([s for _, s in q.lex], 0.0, None)
        base_v = commitment([s for _, s in q.vec], q.median, q.spread)
        scale = wl / base_l if base_l > 0 else 0.0
        trust = wv / base_v if base_v > 0 else 0.0
        if scale == 0.0 and trust == 0.0:
            return shipped(q)
        nearest = Neighbours(q.vec, q.median, q.spread, trust)
        fused = fuse_trusted(_hits(q.lex), _hits(q.vec), nearest, coverage=scale)
        return [h.message_id for h in fused]

    return run


def _z(q: Lists, similarity: float) -> float:
    return (similarity - q.median) / q.spread if q.spread > 0 else 0.0


def w_lex_shipped(q: Lists) -> float:
    return commitment([s for _, s in q.lex], 0.0, None)


def w_vec_shipped(q: Lists) -> float:
    return commitment([s for _, s in q.vec], q.median, q.spread) * q.trust


def cross_examined(q: Lists) -> float:
    """The vectors' weight scaled by how far their top stands above the best of the
    words' top 5 in the vectors' own eyes (up to 3 noise widths: full weight)."""
    if not q.vec or not q.lex:
        return w_vec_shipped(q)
    best = max(_z(q, q.lexsim.get(m, q.median)) for m, _ in q.lex[:CUT])
    gap = max(0.0, _z(q, q.vec[0][1]) - best)
    return w_vec_shipped(q) * min(1.0, gap / 3.0)


def lead_over_second(q: Lists) -> float:
    scores = [s for _, s in q.lex]
    if len(scores) < 2:
        return w_lex_shipped(q)
    spread = statistics.pstdev(scores) or 1.0
    return (scores[0] - scores[1]) / spread


_NAMED = re.compile(r"(?<!^)(?<![.?!]\s)\b[A-Z][a-z]+")


def entity_switch(q: Lists) -> float:
    """Vectors at half weight when the question names something (a capitalised word
    inside it): dense retrievers are known to be weak on entity-centric questions."""
    return w_vec_shipped(q) * (0.5 if _NAMED.search(q.query.strip()) else 1.0)


def oracle(q: Lists) -> list[int]:
    answers = set(q.answers)
    lex, vec = lexical(q), vector(q)
    return lex if set(lex[:CUT]) & answers or not set(vec[:CUT]) & answers else vec


FUSIONS: dict[str, Fusion] = {
    "lexical": lexical,
    "vector ranking (replies included)": vector,
    "shipped (trust fusion)": shipped,
    "reciprocal rank fusion": rank_fusion,
    "cross-examined vectors": weighted(w_lex_shipped, cross_examined),
    "words' lead over their 2nd": weighted(lead_over_second, w_vec_shipped),
    "vectors halved on named things": weighted(w_lex_shipped, entity_switch),
    "oracle (better list per question)": oracle,
}


# per-question signals


def signals(q: Lists) -> dict[str, float]:
    lex = [s for _, s in q.lex]
    vec = [s for _, s in q.vec]
    lexscore = dict(q.lex)
    top_l = {m for m, _ in q.lex[:10]}
    top_v = {m for m, _ in q.vec[:10]}
    spread_l = statistics.pstdev(lex) or 1.0
    c_l, c_v = w_lex_shipped(q), commitment(vec, q.median, q.spread)
    return {
        "vectors' commitment (shipped)": c_v,
        "words' commitment (shipped)": c_l,
        "ratio of the two (shipped)": c_v / (c_l + 1e-9),
        "vectors' top, z against the person": _z(q, vec[0]),
        "vectors' top, raw similarity": vec[0],
        "the person's median similarity": q.median,
        "vectors' lead over their 2nd": _z(q, vec[0]) - _z(q, vec[1]),
        "words' lead over their 2nd": (lex[0] - lex[1]) / spread_l if len(lex) > 1 else 0.0,
        "vectors' z of the words' top": _z(q, q.lexsim.get(q.lex[0][0], q.median)),
        "cross-examination gap": _z(q, vec[0])
        - max(_z(q, q.lexsim.get(m, q.median)) for m, _ in q.lex[:CUT]),
        "words' score of the vectors' top": lexscore.get(q.vec[0][0], 0.0) / (lex[0] or 1.0),
        "overlap of the two top 10s": len(top_l & top_v),
        "lexical hits": len(lex),
    }


def auc(positive: list[float], negative: list[float]) -> float:
    if not positive or not negative:
        return math.nan
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def report(stored: dict[str, Any]) -> None:
    sets = {name: [Lists(**row) for row in rows] for name, rows in stored["lists"].items()}
    for rows in sets.values():
        for q in rows:  # JSON keys are strings, lists of pairs are lists
            q.lexsim = {int(k): v for k, v in q.lexsim.items()}
            q.lex = [(int(m), float(s)) for m, s in q.lex]
            q.vec = [(int(m), float(s)) for m, s in q.vec]
    names = list(sets)
    print(f"\nfusions, recall_any@{CUT}")
    print(f"  {'':36}" + " ".join(f"{n[:14]:>15}" for n in names))
    for label, fusion in FUSIONS.items():
        cells = [_recall(rows, fusion) for rows in sets.values()]
        print(f"  {label:36}" + " ".join(f"{c:15.3f}" for c in cells))
    print(f"\nsearched differently, recall_any@{CUT}")
    print(f"  {'':36}" + " ".join(f"{n[:14]:>15}" for n in names))
    for label, pick in (
        ("content words embedded (vectors)", lambda q: q.content_vec),
        ("pseudo-relevance feedback (words)", lambda q: q.prf),
    ):
        print(f"  {label:36}" + " ".join(f"{_recall(r, pick):15.3f}" for r in sets.values()))
    named = stored["named"]
    cells = [f"{named[n]:15.3f}" if n in named else f"{'':15}" for n in names]
    print(f"  {'speaker names indexed (words)':36}" + " ".join(cells))
    print("\nsignals: AUC of 'the vectors are right' against 'the words are right'")
    pooled: dict[str, tuple[list[float], list[float]]] = {}
    per_set: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    counts = {}
    for name, rows in sets.items():
        split = [q for q in rows if len(q.vec) > 10 and q.lex and _one_right(q) is not None]
        counts[name] = sum(1 for q in split if _one_right(q))
        for q in split:
            side = 0 if _one_right(q) else 1
            for key, value in signals(q).items():
                pooled.setdefault(key, ([], []))[side].append(value)
                per_set.setdefault((name, key), ([], []))[side].append(value)
    print(f"  {'':36} {'pooled':>8}" + " ".join(f"{n[:14]:>15}" for n in names))
    print(
        f"  {'questions, vectors right / words right':36} {'':>8}"
        + " ".join(
            f"{counts.get(n, 0):>7} / {len(per_set.get((n, 'lexical hits'), ([], []))[1]):<5}"
            for n in names
        )
    )
    for key, (positive, negative) in pooled.items():
        cells = [auc(*per_set.get((n, key), ([], []))) for n in names]
        line = " ".join(f"{c:15.2f}" if not math.isnan(c) else f"{'-':>15}" for c in cells)
        print(f"  {key:36} {auc(positive, negative):8.2f}" + line)


def _one_right(q: Lists) -> bool | None:
    answers = set(q.answers)
    by_words = bool(set(lexical(q)[:CUT]) & answers)
    by_vectors = bool(set(vector(q)[:CUT]) & answers)
    return None if by_words == by_vectors else by_vectors


def _recall(rows: list[Lists], pick: Fusion) -> float:
    return sum(1 for q in rows if set(pick(q)[:CUT]) & set(q.answers)) / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embeddings", help="an OpenAI-compatible /v1 URL")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--locomo", type=Path, help="LoCoMo JSON")
    parser.add_argument("--save", type=Path, help="write the rankings here")
    parser.add_argument("--load", type=Path, help="read rankings written by --save")
    args = parser.parse_args()
    if args.load:
        stored = json.loads(args.load.read_text(encoding="utf-8"))
    else:
        if not (args.embeddings and args.locomo):
            parser.error("--embeddings and --locomo (or --load)")
        locomo = json.loads(args.locomo.read_text(encoding="utf-8"))
        stored = collect((args.embeddings, args.model), locomo)
        if args.save:
            args.save.write_text(json.dumps(stored), encoding="utf-8")
    report(stored)


if __name__ == "__main__":
    main()
