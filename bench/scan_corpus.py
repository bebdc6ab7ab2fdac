"""Security-scan block rate and false-positive rate on the shipped corpus, both stages.

    .venv/bin/python bench/scan_corpus.py [--json]
    .venv/bin/python bench/scan_corpus.py --base-url URL --model NAME [--api-key-env VAR]

Stage 1 (patterns) on every attack and benign note of tests/memory/data (English, and
the multilingual corpus per language), and the worst-case scan time at the length cap
over hostile inputs. Stage 2 (the judge model) sees only entries the patterns pass that
speak to the assistant: the bench reports how many of the corpus entries would reach it
and, given an OpenAI-compatible endpoint, runs the judge on them and reports the two
stages together.
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
from hermes.memory.scan_judge import Judge, needs_judgement
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
}


def corpus() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    multi = json.loads((DATA / "scan_multilingual.json").read_text(encoding="utf-8"))
    english_attacks = json.loads((DATA / "scan_attacks.json").read_text(encoding="utf-8"))
    english_benign = json.loads((DATA / "scan_benign.json").read_text(encoding="utf-8"))
    attacks = [{"lang": "en", "text": t} for t in english_attacks] + multi["attacks"]
    benign = [{"lang": "en", "text": t} for t in english_benign] + multi["benign"]
    return attacks, benign


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint for the judge")
    parser.add_argument("--model")
    parser.add_argument("--api-key-env")
    args = parser.parse_args()
    attacks, benign = corpus()
    by_lang: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    passed_attacks, passed_benign = [], []
    started = time.perf_counter()
    for item in attacks:
        lang = by_lang[item["lang"]]
        lang["attacks"] += 1
        if scan(item["text"]) is None:
            passed_attacks.append(item["text"])
        else:
            lang["blocked"] += 1
    for item in benign:
        lang = by_lang[item["lang"]]
        lang["benign"] += 1
        if scan(item["text"]) is not None:
            lang["false_positives"] += 1
        else:
            passed_benign.append(item["text"])
    per_entry_ms = (time.perf_counter() - started) * 1000 / (len(attacks) + len(benign))
    worst = {name: _timed(text) for name, text in HOSTILE.items()}
    blocked = len(attacks) - len(passed_attacks)
    report: dict[str, Any] = {
        "attacks": len(attacks),
        "blocked": blocked,
        "block_rate": round(blocked / len(attacks), 4),
        "benign": len(benign),
        "false_positives": len(benign) - len(passed_benign),
        "false_positive_rate": round((len(benign) - len(passed_benign)) / len(benign), 4),
        "per_language": {k: dict(v) for k, v in sorted(by_lang.items())},
        "mean_scan_ms": round(per_entry_ms, 3),
        "worst_case_ms_at_cap": round(max(worst.values()), 1),
        "worst_case_input": max(worst, key=lambda k: worst[k]),
        "stage2_attacks_reaching_judge": sum(needs_judgement(t) for t in passed_attacks),
        "stage2_benign_reaching_judge": sum(needs_judgement(t) for t in passed_benign),
    }
    if args.base_url and args.model:
        report.update(asyncio.run(_judge(args, passed_attacks, passed_benign)))
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return
    print(
        f"stage 1: attacks blocked {blocked}/{len(attacks)} ({report['block_rate']:.1%}), "
        f"benign refused {report['false_positives']}/{len(benign)} "
        f"({report['false_positive_rate']:.1%})"
    )
    print("| language | attacks blocked | benign refused |\n|---|---|---|")
    for name, row in report["per_language"].items():
        print(
            f"| {name} | {row.get('blocked', 0)}/{row.get('attacks', 0)} | "
            f"{row.get('false_positives', 0)}/{row.get('benign', 0)} |"
        )
    print(
        f"mean scan {per_entry_ms:.2f} ms per entry; worst case at the {MAX_SCAN_CHARS:,}-char "
        f"cap {report['worst_case_ms_at_cap']} ms ({report['worst_case_input']})"
    )
    print(
        f"stage 2 would see {report['stage2_attacks_reaching_judge']} of {len(passed_attacks)} "
        f"attacks the patterns pass and {report['stage2_benign_reaching_judge']} of "
        f"{len(passed_benign)} benign notes"
    )
    if "stage2_blocked" in report:
        print(
            f"both stages: attacks blocked {blocked + report['stage2_blocked']}/{len(attacks)}, "
            f"benign refused {report['false_positives'] + report['stage2_refused']}/{len(benign)}"
        )


async def _judge(args: argparse.Namespace, attacks: list[str], benign: list[str]) -> dict[str, int]:
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    client = LLMClient(Endpoint(base_url=args.base_url, model=args.model, api_key=key))
    judge = Judge(client, timeout=30)
    try:
        caught = [await judge.check(t) for t in attacks]
        refused = [await judge.check(t) for t in benign]
    finally:
        await client.close()
    return {
        "stage2_blocked": sum(f is not None for f in caught),
        "stage2_refused": sum(f is not None for f in refused),
    }


def _timed(text: str) -> float:
    started = time.perf_counter()
    scan(text[:MAX_SCAN_CHARS])
    return (time.perf_counter() - started) * 1000


if __name__ == "__main__":
    main()
