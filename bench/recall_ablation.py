"""Recall of lexical, vector-alone and hybrid search on the three evaluation sets, with
every ranking step switched off in turn (the recall and ablation tables of docs/benchmarks.md).

    .venv/bin/python bench/recall_ablation.py --embeddings http://127.0.0.1:8765/v1 \\
        --locomo ../shared/bench-data/locomo-dev.json [--model all-MiniLM-L6-v2] [--json]
    .venv/bin/python bench/recall_ablation.py --embeddings local --model use-multilingual \\
        --locomo ../shared/bench-data/locomo-dev.json

Sets, each stored in its own state.db and embedded once by the gateway's own Embedder:
- paraphrase (bench/data/paraphrase_eval.json: English, Spanish, German; and
  bench/data/paraphrase_more.json: French, Italian, Portuguese, Russian; each fixed
  before any tuning, read as one set of 8 people) on three
  haystacks: `person` (each person's own history), `pooled` (every person's sessions as
  one person's), `pooled+locomo` (and every LoCoMo conversation as filler);
- LoCoMo in two halves: `tune` (its first 2 conversations, the only ones ranking choices
  may be made on from now on) and `held-out` (the last 3);
- CJK (bench/data/cjk_eval.json).
Each question is asked as `lexical` (no vector), `vector` (the person's nearest messages
alone) and `hybrid`, under each variant of the ranking; recall_any@1/5/10 (any answering
message among the top k). Without --embeddings only the lexical rows are measured.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cjk_recall import ingest  # bench/cjk_recall.py (a script's own folder is on sys.path)
from hybrid import Hybrid
from locomo_recall import evidence_of
from locomo_recall import ingest as ingest_locomo

from hermes.state import engine as eng
from hermes.state.db import SessionDB
from hermes.state.search import Ranking, SearchScope

KS = (1, 5, 10)
DATA = Path(__file__).parent / "data"
TUNE = 2  # LoCoMo conversations ranking choices may look at; the rest are held out

VARIANTS: dict[str, tuple[Ranking, bool]] = {  # name -> (ranking, script trust on)
    "shipped": (Ranking(), True),
    "no neighbour smoothing": (Ranking(smoothing=False), True),
    "no reply expansion": (Ranking(replies=False), True),
    "no question handoff": (Ranking(asked=False), True),
    "no question handoff (vectors)": (Ranking(vector_asked=False), True),
    "no session coverage": (Ranking(sessions=False), True),
    "vector smoothing on": (Ranking(vector_smoothing=True), True),
    "script trust off": (Ranking(), False),
    "word coverage on": (Ranking(coverage=True), True),
    "rank fusion, not trust": (Ranking(trusted=False), True),
}


@dataclass(frozen=True)
class Question:
    user: str
    query: str
    answers: frozenset[int]  # message ids
    group: str  # language, or LoCoMo's category


Build = Callable[[SessionDB], list[Question]]


PARAPHRASES = ("paraphrase_eval.json", "paraphrase_more.json")


def paraphrases() -> dict[str, Any]:
    """Both paraphrase files as one set (their ids do not overlap)."""
    parts = [json.loads((DATA / name).read_text(encoding="utf-8")) for name in PARAPHRASES]
    return {
        "sessions": [s for part in parts for s in part["sessions"]],
        "questions": [q for part in parts for q in part["questions"]],
    }


def paraphrase_set(haystack: str, locomo: list[dict[str, Any]]) -> Build:
    data = paraphrases()

    def build(db: SessionDB) -> list[Question]:
        users, eval_id = ingest(db, data, pooled=haystack != "person")
        if haystack == "pooled+locomo":
            filler = next(iter(users.values()))
            for sample in locomo:
                ingest_locomo(db, sample, filler)
        return _questions(data, users, eval_id)

    return build


def cjk_set(db: SessionDB) -> list[Question]:
    data = json.loads((DATA / "cjk_eval.json").read_text(encoding="utf-8"))
    users, eval_id = ingest(db, data)
    return _questions(data, users, eval_id)


def _questions(
    data: dict[str, Any], users: dict[str, str], eval_id: dict[int, str]
) -> list[Question]:
    ids: dict[str, set[int]] = defaultdict(set)
    for message_id, name in eval_id.items():
        ids[name].add(message_id)
    return [
        Question(
            users[q["user"]],
            q["query"],
            frozenset(m for a in q["answers"] for m in ids[a]),
            q["lang"],
        )
        for q in data["questions"]
    ]


def locomo_set(samples: list[dict[str, Any]]) -> Build:
    def build(db: SessionDB) -> list[Question]:
        questions = []
        for sample in samples:
            user, dia_of = ingest_locomo(db, sample)
            ids: dict[str, set[int]] = defaultdict(set)
            for message_id, dia in dia_of.items():
                ids[dia].add(message_id)
            for qa in sample["qa"]:
                gold = evidence_of(qa)
                if gold:
                    answers = frozenset(m for d in gold for m in ids[d])
                    questions.append(
                        Question(user, str(qa["question"]), answers, f"cat {qa.get('category')}")
                    )
        return questions

    return build


@contextmanager
def stored(build: Build, embeddings: tuple[str, str] | None) -> Iterator[Any]:
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB.open(Path(tmp))
        questions = build(db)
        hybrid = Hybrid(db, *embeddings) if embeddings else None
        if hybrid is not None:
            hybrid.embed_all()
        try:
            yield db, questions, hybrid
        finally:
            if hybrid is not None:
                hybrid.close()
            db.close()


def measure(build: Build, embeddings: tuple[str, str] | None) -> dict[str, Any]:
    """Rank of the first answer for every question, mode and variant -> recall rows."""
    ranks: dict[str, list[int | None]] = defaultdict(list)
    with stored(build, embeddings) as (db, questions, hybrid):
        for q in questions:
            scope = SearchScope(q.user)
            vector = hybrid.vector(q.query) if hybrid is not None else None
            lexical_seen: dict[Ranking, int | None] = {}
            for name, (ranking, script_trust) in VARIANTS.items():
                lexical_key = replace(
                    ranking, vector_smoothing=False, vector_asked=True, trusted=True, coverage=False
                )
                if lexical_key not in lexical_seen:
                    hits = db.conversations.search(scope, q.query, max(KS), ranking=ranking)
                    lexical_seen[lexical_key] = _first(hits, q.answers)
                ranks[f"lexical|{name}"].append(lexical_seen[lexical_key])
                if vector is None:
                    continue
                asked = vector if script_trust else replace(vector, trust=1.0)
                hits = db.conversations.search(scope, q.query, max(KS), asked, ranking)
                ranks[f"hybrid|{name}"].append(_first(hits, q.answers))
            if vector is not None:
                with eng.reading(db.engine) as session:
                    nearest = db.vectors.nearest(session.connection(), q.user, vector, max(KS))
                ranks["vector|"].append(
                    next((i for i, (m, _) in enumerate(nearest.hits) if m in q.answers), None)
                )
            for mode in ("lexical", "vector", "hybrid"):
                key = f"{mode}|shipped" if mode != "vector" else "vector|"
                if ranks.get(key):
                    ranks[f"{mode}|shipped|{q.group}"].append(ranks[key][-1])
    return {key: _recall(values) for key, values in ranks.items()}


def _first(hits: list[Any], answers: frozenset[int]) -> int | None:
    return next((i for i, hit in enumerate(hits) if hit.message_id in answers), None)


def _recall(ranks: list[int | None]) -> dict[str, float]:
    at = {f"@{k}": sum(1 for r in ranks if r is not None and r < k) / len(ranks) for k in KS}
    return at | {"n": len(ranks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--embeddings", help="an OpenAI-compatible /v1 URL, or `local` (vector, hybrid)"
    )
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--locomo", type=Path, required=True, help="LoCoMo JSON")
    parser.add_argument("--only", help="one set: paraphrase/person, locomo/tune, cjk, ...")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    embeddings = (args.embeddings, args.model) if args.embeddings else None
    locomo = json.loads(args.locomo.read_text(encoding="utf-8"))
    sets: dict[str, Build] = {
        "paraphrase/person": paraphrase_set("person", locomo),
        "paraphrase/pooled": paraphrase_set("pooled", locomo),
        "paraphrase/pooled+locomo": paraphrase_set("pooled+locomo", locomo),
        "locomo/tune": locomo_set(locomo[:TUNE]),
        "locomo/held-out": locomo_set(locomo[TUNE:]),
        "cjk": cjk_set,
    }
    results = {
        name: measure(build, embeddings)
        for name, build in sets.items()
        if not args.only or name == args.only
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, rows in results.items():
        print(f"\n{name}")
        for key, row in rows.items():
            cells = " / ".join(f"{row[f'@{k}']:.3f}" for k in KS)
            print(f"  {key.replace('|', ' ').strip():44} n={row['n']:<4} {cells}")


if __name__ == "__main__":
    main()
