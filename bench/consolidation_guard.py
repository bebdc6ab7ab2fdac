"""The consolidation validator's rejection table on the shipped hostile proposals.

    .venv/bin/python bench/consolidation_guard.py [--json]

Runs every proposal in tests/memory/data/hostile_consolidations.json and
hostile_swaps.json (words swapped, six languages) through the validator (the same
`validate` consolidation calls, with the store's protected entries worked out as
consolidation does) and prints, per attack, whether it was rejected and why; then the
good proposals, which must all pass.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from hermes.config import ConsolidationConfig, MemoryConfig
from hermes.memory import entries as fmt
from hermes.memory.consolidation import ProposalError, is_protected, parse, validate
from hermes.memory.store import StoreState

DATA = Path(__file__).resolve().parents[1] / "tests" / "memory" / "data"


def proposal_for(case: dict[str, Any], entries: list[str]) -> dict[str, Any]:
    dropped = {int(i): reason for i, reason in case.get("dropped", {}).items()}
    mentioned = {s for item in case["entries"] for s in item["sources"]} | set(dropped)
    items = [*case["entries"]] + [
        {"text": text, "sources": [i]} for i, text in enumerate(entries, 1) if i not in mentioned
    ]
    items.sort(key=lambda item: min(item["sources"]))
    return {"entries": items, "dropped": [{"id": i, "reason": r} for i, r in dropped.items()]}


def judge(case: dict[str, Any], data: dict[str, Any]) -> str | None:
    """None if the proposal passes, else the validator's reason."""
    entries = data["entries"]
    state = StoreState(tuple(entries), MemoryConfig().memory_char_limit, raw=fmt.serialize(entries))
    protected = {
        i for i, text in enumerate(entries, 1) if i in data["user_written"] or is_protected(text)
    }
    try:
        validate(
            parse(json.dumps(proposal_for(case, entries))), state, protected, ConsolidationConfig()
        )
    except ProposalError as exc:
        return str(exc)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    attacks, good = [], []
    for name in ("hostile_consolidations.json", "hostile_swaps.json"):
        data = json.loads((DATA / name).read_text(encoding="utf-8"))
        attacks += [(c["name"], c["category"], judge(c, data)) for c in data["attacks"]]
        good += [(c["name"], judge(c, data)) for c in data["good"]]
    report = {
        "attacks": len(attacks),
        "rejected": sum(reason is not None for *_, reason in attacks),
        "good": len(good),
        "good_applied": sum(reason is None for _, reason in good),
        "table": [{"attack": n, "category": c, "rejected_because": r} for n, c, r in attacks],
    }
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return
    print(f"hostile proposals rejected: {report['rejected']}/{report['attacks']}")
    print(f"faithful proposals applied: {report['good_applied']}/{report['good']}\n")
    print("| attack | check | rejected because |\n|---|---|---|")
    for name, category, reason in attacks:
        shown = re.sub(r"\s+", " ", reason or "**ACCEPTED**")
        print(f"| {name} | {category} | {shown.replace('|', '/')} |")
    for name, reason in good:
        if reason is not None:
            print(f"good proposal rejected: {name}: {reason}")


if __name__ == "__main__":
    main()
