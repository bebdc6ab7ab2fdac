"""Recall on questions asked in other words than their answers (issue #27's set):
lexical, the vector list alone and hybrid, at 1/5/10, on three haystacks.

    .venv/bin/python bench/paraphrase_recall.py --embeddings http://127.0.0.1:8765/v1 \\
        [--model all-MiniLM-L6-v2] [--locomo ../shared/bench-data/locomo-dev.json] [--json]

The set (bench/data/paraphrase_eval.json) was written before any tuning and is kept
fixed. Haystacks: `person` (each person's own history: what session_search sees),
`pooled` (every person's sessions as one person's: the others' become distractors),
`pooled+locomo` (and every LoCoMo development conversation as filler, ~6,000 turns).
Modes: `lexical` (the word lists, no vector), `vector` (the person's nearest messages by
cosine similarity, nothing else), `hybrid` (what session_search ranks with embeddings
on). Without --embeddings only `lexical` is measured.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from cjk_recall import ingest  # bench/cjk_recall.py (a script's own folder is on sys.path)
from hybrid import Hybrid
from locomo_recall import ingest as ingest_locomo

from hermes.state import engine as eng
from hermes.state.db import SessionDB
from hermes.state.search import SearchScope

KS = (1, 5, 10)
DATA = Path(__file__).parent / "data" / "paraphrase_eval.json"
HAYSTACKS = ("person", "pooled", "pooled+locomo")


def ranked(db: SessionDB, mode: str, user: str, query: str, hybrid: Hybrid | None) -> list[int]:
    if mode == "lexical":
        return [h.message_id for h in db.conversations.search(SearchScope(user), query, max(KS))]
    assert hybrid is not None
    vector = hybrid.vector(query)
    if mode == "hybrid":
        hits = db.conversations.search(SearchScope(user), query, max(KS), vector=vector)
        return [h.message_id for h in hits]
    with eng.reading(db.engine) as session:
        nearest = db.vectors.nearest(session.connection(), user, vector, max(KS))
    return [message_id for message_id, _ in nearest]


def run(
    data: dict[str, Any], haystack: str, embeddings: tuple[str, str] | None, locomo: Path | None
) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB.open(Path(tmp))
        users, eval_id = ingest(db, data, pooled=haystack != "person")
        if haystack == "pooled+locomo":
            assert locomo is not None, "--locomo is needed for the third haystack"
            filler = next(iter(users.values()))
            for sample in json.loads(locomo.read_text(encoding="utf-8")):
                ingest_locomo(db, sample, filler)
        hybrid = Hybrid(db, *embeddings) if embeddings else None
        if hybrid is not None:
            hybrid.embed_all()
        modes = ("lexical", "vector", "hybrid") if hybrid else ("lexical",)
        found: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for question in data["questions"]:
            for mode in modes:
                hits = ranked(db, mode, users[question["user"]], question["query"], hybrid)
                ids = [eval_id.get(h) for h in hits]
                answers = set(question["answers"])
                rank = next((i for i, f in enumerate(ids) if f in answers), None)
                for group in (mode, f"{mode} {question['lang']}"):
                    found[group].append({"rank": rank})
        if hybrid is not None:
            hybrid.close()
        db.close()
    return {
        group: {
            f"@{k}": sum(1 for r in rows if r["rank"] is not None and r["rank"] < k) / len(rows)
            for k in KS
        }
        | {"n": len(rows)}
        for group, rows in found.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--embeddings", help="an OpenAI-compatible /v1 URL (vector, hybrid)")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--locomo", type=Path, help="LoCoMo JSON: the third haystack's filler")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))
    embeddings = (args.embeddings, args.model) if args.embeddings else None
    haystacks = [h for h in HAYSTACKS if h != "pooled+locomo" or args.locomo]
    results = {h: run(data, h, embeddings, args.locomo) for h in haystacks}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'haystack':14} {'mode':12} {'n':>3}   @1     @5     @10")
    for haystack, groups in results.items():
        for group in sorted(groups, key=lambda g: (len(g.split()), g)):
            g = groups[group]
            at = "  ".join(f"{g[f'@{k}']:.3f}" for k in KS)
            print(f"{haystack:14} {group:12} {g['n']:>3}  {at}")


if __name__ == "__main__":
    main()
