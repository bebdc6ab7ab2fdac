"""Background memory review: every `memory.review_interval` user turns, after the reply,
a side call with only the memory tool looks at the recent turns for facts worth keeping.
It never delays a reply and never runs twice at once for one user (see Agent)."""

from __future__ import annotations

import logging
from typing import Any

from hermes.agent.conversation import Conversation, transcript
from hermes.agent.toolbox import ToolBox, side_loop
from hermes.llm.client import LLMError
from hermes.llm.types import ChatModel

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "You maintain the long-term memory of a personal assistant. Read the recent "
    "conversation below. Did the user reveal preferences, corrections, facts about "
    "themselves, their environment or their projects that are worth keeping across "
    "sessions? If so, save them with the memory tool: dense declarative entries, merged "
    "into existing ones with `replace` rather than duplicated. Skip trivia and anything "
    "already in memory. If nothing is worth saving, reply 'nothing'."
)
RECENT_MESSAGES = 20
MAX_ITERATIONS = 3


async def run(conv: Conversation, *, model: ChatModel, tools: ToolBox, snapshot: str) -> None:
    """Review `conv` with `tools` (the memory tool of the person whose store it may
    write) and their memory `snapshot` as it is now."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"{INSTRUCTIONS}\n\n{snapshot or '(memory is empty)'}"},
        {"role": "user", "content": transcript(conv.history[-RECENT_MESSAGES:], 12_000)},
    ]
    try:
        await side_loop(model, messages, tools, MAX_ITERATIONS, temperature=0.2)
    except LLMError as exc:
        logger.warning("memory review failed: %s", exc)
