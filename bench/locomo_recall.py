"""Retrieval recall on LoCoMo through the same ranked message search the tool uses.

    .venv/bin/python bench/locomo_recall.py --data ../shared/bench-data/locomo-dev.json [--json]

Each conversation is ingested as the sessions of its own user (conversations never mix):
speaker A's turns as `user` messages, speaker B's as `assistant`, a shared photo as its
caption. Every question goes through SessionDB.search (before grouping by session) and
we report turn-level recall_any@1/5/10 (any evidence turn among the top k messages) and
session-level recall_all@5 (every evidence session among the top 5 sessions, grouped as
the tool groups them), overall and per category. No LLM is involved.
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

from hermes.identity import new_user_id
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.search import SearchScope

EVIDENCE = re.compile(r"D(\d+):(\d+)")
KS = (1, 5, 10)


def session_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def ingest(db: SessionDB, sample: dict[str, Any]) -> tuple[str, dict[int, str]]:
    """Store one conversation under a new user; returns the user and message id -> dia_id."""
    user = db.people.ensure_user(new_user_id()).id
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
    db: SessionDB, user: str, dia_of: dict[int, str], qa: dict[str, Any]
) -> dict[str, float]:
    gold = evidence_of(qa)
    hits = db.conversations.search(SearchScope(user), str(qa["question"]), limit=60)
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


def run(data: Path) -> dict[str, Any]:
    samples = json.loads(data.read_text(encoding="utf-8"))
    totals: dict[str, list[float]] = defaultdict(list)
    by_category: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as tmp:
        db = SessionDB(Path(tmp) / "state.db")
        for sample in samples:
            user, dia_of = ingest(db, sample)
            for qa in sample["qa"]:
                if not evidence_of(qa):
                    continue
                for key, value in evaluate(db, user, dia_of, qa).items():
                    totals[key].append(value)
                    by_category[str(qa.get("category"))][key].append(value)
        db.close()
    report: dict[str, Any] = {k: round(sum(v) / len(v), 4) for k, v in totals.items()}
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
    args = parser.parse_args()
    report = run(args.data)
    if args.json:
        print(json.dumps(report))
        return
    print(f"questions: {report['questions']}")
    for key in (
        "turn_recall_any@1",
        "turn_recall_any@5",
        "turn_recall_any@10",
        "session_recall_all@5",
    ):
        print(f"{key:22} {report[key]:.3f}")
    for category, metrics in report["per_category"].items():
        cells = "  ".join(
            f"{k.split('_')[-1]}={v:.3f}" for k, v in metrics.items() if k != "questions"
        )
        print(f"  category {category} ({metrics['questions']} q): {cells}")


if __name__ == "__main__":
    main()
