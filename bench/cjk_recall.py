"""Recall of session_search's ranked message search on Korean, Chinese, Japanese and
mixed CJK-English questions.

    .venv/bin/python bench/cjk_recall.py [--data bench/data/cjk_eval.json] [--json] [--misses]
        [--embeddings http://127.0.0.1:8765/v1 [--model all-MiniLM-L6-v2]]

The evaluation set (bench/data/cjk_eval.json, written by hand, never used to fit a
weight) holds 3 users' sessions, distractors that share vocabulary included, and 62
questions with the ids of the messages that answer them. Each user's sessions are
stored under their own user id; each question goes through SessionDB's search (the
same ranked list session_search groups) confined to its user, and we report
recall_any@1/5/10 (any answering message among the top k) per language and per kind
(exact wording, paraphrase, number, product name). No model is involved, unless
--embeddings names an OpenAI-compatible endpoint: then every message is embedded by the
gateway's own Embedder and the questions are asked hybrid (vector fused with the lexical
lists) instead.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from hybrid import Hybrid  # bench/hybrid.py (a script's own folder is on sys.path)

from hermes.identity import new_user_id
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.search import SearchScope

KS = (1, 5, 10)
DEFAULT = Path(__file__).parent / "data" / "cjk_eval.json"


def ingest(
    db: SessionDB, data: dict[str, Any], pooled: bool = False
) -> tuple[dict[str, str], dict[int, str]]:
    """Every session under its user (`pooled`: all under one); returns user name -> user
    id, message id -> eval id."""
    users: dict[str, str] = {}
    one = db.people.ensure_user(new_user_id()).id if pooled else None
    eval_id: dict[int, str] = {}
    for session in data["sessions"]:
        name = session["user"]
        if name not in users:
            users[name] = one or db.people.ensure_user(new_user_id()).id
        chat = db.conversations.start_session(users[name], session["platform"], session["id"])
        messages = [NewMessage(m["role"], m["content"]) for m in session["messages"]]
        stored = db.conversations.add_messages(chat.id, messages)
        for message, message_id in zip(session["messages"], stored, strict=True):
            assert message_id is not None
            eval_id[message_id] = message["id"]
    return users, eval_id


def evaluate(
    data: dict[str, Any], embeddings: tuple[str, str] | None = None, postgres: str | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB.open(Path(tmp), postgres)
        users, eval_id = ingest(db, data)
        hybrid = Hybrid(db, *embeddings) if embeddings else None
        if hybrid is not None:
            hybrid.embed_all()
        rows = []
        for question in data["questions"]:
            scope = SearchScope(users[question["user"]])
            vector = hybrid.vector(question["query"]) if hybrid else None
            hits = db.conversations.search(scope, question["query"], limit=max(KS), vector=vector)
            found = [eval_id[hit.message_id] for hit in hits]
            answers = set(question["answers"])
            first = next((i for i, f in enumerate(found) if f in answers), None)
            rows.append({**question, "rank": first, "top": found[:3]})
        if hybrid is not None:
            hybrid.close()
        db.close()
    return {"by": summarize(rows), "rows": rows}


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups["all"].append(row)
        groups[row["lang"]].append(row)
        groups[f"kind:{row['kind']}"].append(row)
    return {
        name: {
            "questions": len(items),
            **{
                f"recall_any@{k}": sum(1 for r in items if r["rank"] is not None and r["rank"] < k)
                / len(items)
                for k in KS
            },
        }
        for name, items in groups.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--misses", action="store_true", help="List questions missed at 5.")
    parser.add_argument("--embeddings", help="an OpenAI-compatible /v1 URL: ask hybrid")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--postgres", metavar="URL", help="state.db on PostgreSQL (empty db)")
    args = parser.parse_args()
    embeddings = (args.embeddings, args.model) if args.embeddings else None
    data = json.loads(args.data.read_text(encoding="utf-8"))
    result = evaluate(data, embeddings, args.postgres)
    if args.json:
        print(json.dumps(result["by"], indent=2))
        return
    print(f"{'group':16} {'n':>3}  any@1  any@5  any@10")
    order = ["ko", "zh", "ja", "mixed", "all"]
    names = order + sorted(n for n in result["by"] if n not in order)
    for name in names:
        if name in result["by"]:
            g = result["by"][name]
            print(
                f"{name:16} {g['questions']:>3}  {g['recall_any@1']:.3f}  "
                f"{g['recall_any@5']:.3f}  {g['recall_any@10']:.3f}"
            )
    if args.misses:
        for row in result["rows"]:
            if row["rank"] is None or row["rank"] >= 5:
                print(f"  miss {row['id']} [{row['lang']}] {row['query']} -> {row['top']}")


if __name__ == "__main__":
    main()
