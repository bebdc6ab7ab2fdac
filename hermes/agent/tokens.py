"""A cheap token estimate (no tokenizer download, which would fail offline).

About 4 characters per token for Latin text and one token per CJK character; the
endpoint's reported `usage.prompt_tokens` is ground truth for what was already sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from hermes.state.cjk import is_cjk

PER_MESSAGE_OVERHEAD = 4


def estimate_text(text: str) -> int:
    cjk = sum(1 for char in text if is_cjk(char))
    return cjk + (len(text) - cjk + 3) // 4


def estimate_messages(messages: Iterable[dict[str, Any]]) -> int:
    total = 0
    for message in messages:
        total += PER_MESSAGE_OVERHEAD + estimate_text(str(message.get("content") or ""))
        if message.get("tool_calls"):
            total += estimate_text(json.dumps(message["tool_calls"]))
    return total
