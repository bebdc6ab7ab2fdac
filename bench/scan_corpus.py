"""Security-scan block rate and false-positive rate on the shipped corpus.

.venv/bin/python bench/scan_corpus.py [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from hermes.memory.scanner import MAX_SCAN_CHARS, scan

DATA = Path(__file__).resolve().parents[1] / "tests" / "memory" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    attacks = json.loads((DATA / "scan_attacks.json").read_text(encoding="utf-8"))
    benign = json.loads((DATA / "scan_benign.json").read_text(encoding="utf-8"))
    blocked = sum(scan(text) is not None for text in attacks)
    false_pos = [text for text in benign if scan(text) is not None]
    worst = max(
        _timed(text)
        for text in ("ignore " * 1200, "curl " * 1600, "send " * 1600, "a" * MAX_SCAN_CHARS)
    )
    report = {
        "attacks": len(attacks),
        "blocked": blocked,
        "block_rate": round(blocked / len(attacks), 4),
        "benign": len(benign),
        "false_positives": len(false_pos),
        "false_positive_rate": round(len(false_pos) / len(benign), 4),
        "worst_case_scan_ms_at_cap": round(worst, 2),
    }
    if args.json:
        print(json.dumps(report))
        return
    print(f"attacks blocked: {blocked}/{len(attacks)} ({report['block_rate']:.1%})")
    print(f"benign blocked:  {len(false_pos)}/{len(benign)} ({report['false_positive_rate']:.1%})")
    print(f"worst-case scan of {MAX_SCAN_CHARS:,} hostile chars: {worst:.1f} ms")
    for text in false_pos:
        print(f"  false positive: {text!r}")


def _timed(text: str) -> float:
    started = time.perf_counter()
    scan(text[:MAX_SCAN_CHARS])
    return (time.perf_counter() - started) * 1000


if __name__ == "__main__":
    main()
