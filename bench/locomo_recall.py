"""Retrieval recall on LoCoMo through the same ranked message search the tool uses.

    .venv/bin/python bench/locomo_recall.py --data ../shared/bench-data/locomo-dev.json [--json]
        [--embeddings http://127.0.0.1:8765/v1 [--model all-MiniLM-L6-v2]]

Each conversation is ingested as the sessions of its own user (conversations never mix):
speaker A's turns as `user` messages, speaker B's as `assistant`, a shared photo as its
caption. Every question goes through SessionDB.search (before grouping by session) and
we report turn-level recall_any@1/5/10 (any evidence turn among the top k messages) and
session-level recall_all@5 (every evidence session among the top 5 sessions, grouped as
the tool groups them), overall and per category. No LLM is involved.

With --embeddings (an OpenAI-compatible endpoint, e.g. bench/embed_server.py), every
message is embedded by the gateway's own Embedder and each question is asked twice:
lexical, then hybrid (its vector fused with the lexical lists); both are reported, with
the embedding throughput and the vector index size.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybrid import Hybrid  # bench/hybrid.py (a script's own folder is on sys.path)

from hermes.identity import new_user_id
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.search import SearchScope
from hermes.state.vectors import QueryVector

EVIDENCE = re.compile(r"D(\d+):(\d+)")
KS = (1, 5, 10)


def session_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def ingest(
    db: SessionDB, sample: dict[str, Any], user: str | None = None
) -> tuple[str, dict[int, str]]:
    """Store one conversation under a new user (or `user`: filler for another bench);
    returns the user and message id -> dia_id."""
    user = user or db.people.ensure_user(new_user_id()).id
    conv = sample["conversation"]
    speaker_a = conv.get("speaker_a")
    dia_of: dict[int, str] = {}
    numbers = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    for number in numbers:
        turns = conv[f"session_{number}"]
        if not turns:
            continue
        chat = db.conversations.start_session(
            user,
            "locomo",
            f"locomo:{number}",
            started_at=session_time(conv.get(f"session_{number}_date_time")),
        )
        messages = []
        for turn in turns:
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text += f" [shared a photo: {turn['blip_caption']}]"
            role = "user" if turn["speaker"] == speaker_a else "assistant"
            messages.append(NewMessage(role, text))
        for turn, message_id in zip(
            turns, db.conversations.add_messages(chat.id, messages), strict=True
        ):
            assert message_id is not None
            dia_of[message_id] = turn["dia_id"]
    return user, dia_of


def evidence_of(qa: dict[str, Any]) -> set[str]:
    return {f"D{a}:{b}" for item in qa.get("evidence", []) for a, b in EVIDENCE.findall(item)}


def evaluate(
    db: SessionDB,
    user: str,
    dia_of: dict[int, str],
    qa: dict[str, Any],
    vector: QueryVector | None = None,
) -> dict[str, float]:
    gold = evidence_of(qa)
    scope = SearchScope(user)
    hits = db.conversations.search(scope, str(qa["question"]), limit=60, vector=vector)
    dias = [dia_of.get(hit.message_id, "") for hit in hits]
    scores = {f"turn_recall_any@{k}": float(bool(gold & set(dias[:k]))) for k in KS}
    sessions: list[str] = []
    for dia in dias:
        session = dia.split(":")[0]
        if session and session not in sessions:
            sessions.append(session)
    gold_sessions = {g.split(":")[0] for g in gold}
    scores["session_recall_all@5"] = float(gold_sessions <= set(sessions[:5]))
    return scores


def run(
    data: Path, embeddings: tuple[str, str] | None = None, postgres: str | None = None
) -> dict[str, Any]:
    samples = json.loads(data.read_text(encoding="utf-8"))
    totals: dict[str, list[float]] = defaultdict(list)
    by_category: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    extra: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "state.db", url=postgres)
        stored = [(ingest(db, sample), sample) for sample in samples]
        hybrid = Hybrid(db, *embeddings) if embeddings else None
        if hybrid is not None:
            extra["embedding"] = hybrid.embed_all()
        for (user, dia_of), sample in stored:
            for qa in sample["qa"]:
                if not evidence_of(qa):
                    continue
                scores = evaluate(db, user, dia_of, qa)
                if hybrid is not None:
                    vector = hybrid.vector(str(qa["question"]))
                    hybrid_scores = evaluate(db, user, dia_of, qa, vector)
                    scores |= {f"hybrid_{k}": v for k, v in hybrid_scores.items()}
                for key, value in scores.items():
                    totals[key].append(value)
                    by_category[str(qa.get("category"))][key].append(value)
        if hybrid is not None:
            hybrid.close()
        db.close()
    report: dict[str, Any] = {k: round(sum(v) / len(v), 4) for k, v in totals.items()}
    report |= extra
    report["questions"] = len(totals["turn_recall_any@5"])
    report["per_category"] = {
        cat: {k: round(sum(v) / len(v), 4) for k, v in metrics.items()}
        | {"questions": len(metrics["turn_recall_any@5"])}
        for cat, metrics in sorted(by_category.items())
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--embeddings", help="an OpenAI-compatible /v1 URL: also run hybrid")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--postgres", metavar="URL", help="state.db on PostgreSQL (empty db)")
    args = parser.parse_args()
    embeddings = (args.embeddings, args.model) if args.embeddings else None
    report = run(args.data, embeddings, args.postgres)
    if args.json:
        print(json.dumps(report))
        return
    print(f"questions: {report['questions']}")
    keys = ("turn_recall_any@1", "turn_recall_any@5", "turn_recall_any@10", "session_recall_all@5")
    for key in keys:
        hybrid = report.get(f"hybrid_{key}")
        print(f"{key:22} {report[key]:.3f}" + (f"   hybrid {hybrid:.3f}" if hybrid else ""))
    if "embedding" in report:
        print(f"embedding: {report['embedding']}")
    for category, metrics in report["per_category"].items():
        cells = "  ".join(
            f"{k.split('_')[-1]}={v:.3f}" for k, v in metrics.items() if k != "questions"
        )
        print(f"  category {category} ({metrics['questions']} q): {cells}")


if __name__ == "__main__":
    main()
