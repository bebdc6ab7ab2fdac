"""The memory guard over its evaluation corpus (tests/memory/data/guard_corpus.json: 23
languages, every category, benign notes that quote attacks or need joiners and marks),
through the real memory service and the real client, with a scripted judge: the fake
model answers each note as its label says. This proves the pipeline, not a model's
accuracy (bench/scan_corpus.py --judge URL measures that): the rules refuse nothing
benign, every note they are unsure of reaches the judge, and the judge's verdict is
what happens to it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hermes.config import MemoryConfig
from hermes.identity import new_user_id
from hermes.llm.client import LLMClient
from hermes.llm.endpoint import Endpoint
from hermes.memory.scan_judge import Judge
from hermes.memory.scanner import scan
from hermes.memory.service import MemoryService
from hermes.state.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI, Reply, verdict

CORPUS = json.loads(
    (Path(__file__).parent / "data" / "guard_corpus.json").read_text(encoding="utf-8")
)
CATEGORY = {"safety": "safety", "instruction": "instruction", "others": "others",
            "persistence": "persistence", "exfiltration": "exfiltration",
            "impersonation": "impersonation", "secret": "secret"}  # fmt: skip


def test_the_corpus_covers_twenty_languages_and_every_category() -> None:
    languages = {a["lang"] for a in CORPUS["attacks"]} & {b["lang"] for b in CORPUS["benign"]}
    assert len(languages) >= 20
    assert {a["category"] for a in CORPUS["attacks"]} == set(CATEGORY)
    assert {"quotes_attack", "script_marks"} <= {b["kind"] for b in CORPUS["benign"]}


def test_rules_and_a_scripted_judge_block_every_attack_and_refuse_nothing_benign(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    labels = {a["text"]: CATEGORY[a["category"]] for a in CORPUS["attacks"]}

    def scripted(note: str) -> Reply:
        category = labels.get(note)
        return Reply(text=verdict("block", category) if category else verdict("allow"))

    fake_llm.judge = scripted
    notes = [(a["text"], True) for a in CORPUS["attacks"]]
    notes += [(b["text"], False) for b in CORPUS["benign"]]

    async def go() -> list[tuple[str, bool, dict[str, Any]]]:
        db = SessionDB.open(home)
        client = LLMClient(Endpoint(base_url=fake_llm.base_url, model="judge", max_retries=0))
        service = MemoryService(home, MemoryConfig(), db, judge=Judge(client))
        try:
            out = []
            for text, attack in notes:
                args = {"action": "add", "target": "memory", "content": text}
                outcome = await service.apply(new_user_id(), args, actor="agent")
                out.append((text, attack, outcome.result))
            return out
        finally:
            await client.close()
            db.close()

    results = asyncio.run(go())
    let_through = [text for text, attack, result in results if attack and result["success"]]
    refused = [(text, r["error"]) for text, attack, r in results if not attack and not r["success"]]
    assert let_through == [] and refused == []
    quoting = [b["text"] for b in CORPUS["benign"] if b["kind"] == "quotes_attack"]
    ruled = [text for text in quoting if (f := scan(text)) is not None and f.quoted]
    assert ruled and set(ruled) <= set(fake_llm.judge_requests)  # the model decided those
