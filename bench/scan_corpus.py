"""The memory guard on its corpora: block rate and false positives per category and per
language, for the rules alone and for the rules with the judge model.

    .venv/bin/python bench/scan_corpus.py [--json]
    .venv/bin/python bench/scan_corpus.py --judge URL --model NAME [--api-key-env VAR]

Corpora (tests/memory/data): guard_corpus.json (23 languages, every category, benign
notes that quote attacks or need joiners and direction marks) and the earlier ones
(scan_attacks.json, scan_benign.json, scan_multilingual.json).

"rules alone" is the guard with no model (memory.scan.judge: off, or no model at all):
every rule finding refuses. "rules + judge" is the default: the rules refuse what they
are sure of, and the model judges the rest, including notes whose only rule match lies
inside quotation marks. Without --judge the second column is not measured (the tests
run the pipeline with a scripted judge); with it, every note the rules let through is
sent to that OpenAI-compatible endpoint, so the figure is that model's accuracy.
Also the worst-case scan time at the length cap over hostile inputs.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from hermes.llm.client import LLMClient
from hermes.llm.endpoint import Endpoint
from hermes.memory.scan_judge import Judge
from hermes.memory.scanner import MAX_SCAN_CHARS, scan

DATA = Path(__file__).resolve().parents[1] / "tests" / "memory" / "data"
HOSTILE = {
    "ignore x1140": "ignore " * 1140,
    "send x1600": "send " * 1600,
    "a x8000": "a" * MAX_SCAN_CHARS,
    "a. x4000": "a." * 4000,
    "a@ x4000": "a@" * 4000,
    "you x2000": "you " * 2000,
    "你 x8000": "你" * MAX_SCAN_CHARS,
    "spaced letters": "a b " * 2000,
    "one base64 token": base64.b64encode(b"x" * 5900).decode()[:MAX_SCAN_CHARS],
    "hex": "ab" * 4000,
    "percent-encoded": "%41" * 2666,
    "<a x2666": "<a " * 2666,
    "send lines": "send\n" * 1600,
    "mixed-script words": "Ignоre " * 1140,
    "zero-width joiners": "a\u200db" * 2666,
}


def corpus() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Attacks (lang, category, text) and benign notes (lang, kind, text)."""
    guard = json.loads((DATA / "guard_corpus.json").read_text(encoding="utf-8"))
    multi = json.loads((DATA / "scan_multilingual.json").read_text(encoding="utf-8"))
    english_attacks = json.loads((DATA / "scan_attacks.json").read_text(encoding="utf-8"))
    english_benign = json.loads((DATA / "scan_benign.json").read_text(encoding="utf-8"))
    attacks = guard["attacks"] + [
        {"lang": "en", "category": "earlier", "text": t} for t in english_attacks
    ]
    attacks += [{**a, "category": "earlier"} for a in multi["attacks"]]
    benign = guard["benign"] + [
        {"lang": "en", "kind": "earlier", "text": t} for t in english_benign
    ]
    benign += [{**b, "kind": "earlier"} for b in multi["benign"]]
    return attacks, benign


def tally(
    attacks: list[dict[str, Any]], benign: list[dict[str, Any]], refused: dict[str, bool]
) -> dict[str, Any]:
    """Blocked/total per category and per language, and refused/total for benign notes."""
    rows: dict[str, dict[str, list[int]]] = {
        "category": defaultdict(lambda: [0, 0]),
        "language": defaultdict(lambda: [0, 0, 0, 0]),
    }
    for item in attacks:
        hit = int(refused[item["text"]])
        for key, value in (("category", item["category"]), ("language", item["lang"])):
            rows[key][value][0] += hit
            rows[key][value][1] += 1
    for item in benign:
        language = rows["language"][item["lang"]]
        language[2] += int(refused[item["text"]])
        language[3] += 1
    blocked = sum(refused[a["text"]] for a in attacks)
    false = sum(refused[b["text"]] for b in benign)
    return {
        "blocked": blocked,
        "attacks": len(attacks),
        "false_positives": false,
        "benign": len(benign),
        "per_category": {k: v for k, v in sorted(rows["category"].items())},
        "per_language": {k: v for k, v in sorted(rows["language"].items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--judge", metavar="URL", help="an OpenAI-compatible endpoint (/v1)")
    parser.add_argument("--model", help="the judge's model name")
    parser.add_argument("--api-key-env", help="the env var holding the endpoint's key")
    args = parser.parse_args()
    attacks, benign = corpus()
    texts = [item["text"] for item in attacks + benign]
    started = time.perf_counter()
    findings = {text: scan(text) for text in texts}
    per_entry_ms = (time.perf_counter() - started) * 1000 / len(texts)
    alone = {t: f is not None for t, f in findings.items()}
    report: dict[str, Any] = {"rules_alone": tally(attacks, benign, alone)}
    if args.judge:
        if not args.model:
            parser.error("--judge needs --model")
        undecided = [t for t, f in findings.items() if f is None or f.quoted]
        judged = asyncio.run(_judged(args, undecided))
        both = {t: (f is not None and not f.quoted) or judged.get(t, False)
                for t, f in findings.items()}  # fmt: skip
        report["rules_and_judge"] = tally(attacks, benign, both)
        report["judge_model"] = args.model
    worst = {name: _timed(text) for name, text in HOSTILE.items()}
    report["mean_scan_ms"] = round(per_entry_ms, 3)
    report["worst_case_ms_at_cap"] = round(max(worst.values()), 1)
    report["worst_case_input"] = max(worst, key=lambda k: worst[k])
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return
    for stage in ("rules_alone", "rules_and_judge"):
        if stage in report:
            _print(stage.replace("_", " "), report[stage])
    print(
        f"mean scan {per_entry_ms:.2f} ms per entry; worst case at the {MAX_SCAN_CHARS:,}-char "
        f"cap {report['worst_case_ms_at_cap']} ms ({report['worst_case_input']})"
    )


def _print(title: str, table: dict[str, Any]) -> None:
    print(
        f"{title}: attacks blocked {table['blocked']}/{table['attacks']} "
        f"({table['blocked'] / table['attacks']:.1%}), benign refused "
        f"{table['false_positives']}/{table['benign']} "
        f"({table['false_positives'] / table['benign']:.1%})"
    )
    print("| category | blocked |\n|---|---|")
    for name, (hit, total) in table["per_category"].items():
        print(f"| {name} | {hit}/{total} |")
    print("| language | attacks blocked | benign refused |\n|---|---|---|")
    for name, (hit, total, false, clean) in table["per_language"].items():
        print(f"| {name} | {hit}/{total} | {false}/{clean} |")


async def _judged(args: argparse.Namespace, texts: list[str]) -> dict[str, bool]:
    """Whether the judge blocks each text (a judge that cannot answer: not blocked, and
    counted as such; the gateway would hold the write)."""
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    client = LLMClient(Endpoint(base_url=args.judge, model=args.model, api_key=key))
    judge = Judge(client, timeout=60)
    try:
        verdicts = [await judge.check(text) for text in texts]
    finally:
        await client.close()
    return {text: v.finding is not None for text, v in zip(texts, verdicts, strict=True)}


def _timed(text: str) -> float:
    started = time.perf_counter()
    scan(text[:MAX_SCAN_CHARS])
    return (time.perf_counter() - started) * 1000


if __name__ == "__main__":
    main()
