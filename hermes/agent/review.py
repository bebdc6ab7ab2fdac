"""Background memory review: every `memory.review_interval` user turns, after the reply,
a side call with only the memory tool looks at the recent turns for facts worth keeping.
It never delays a reply and never runs twice at once for one user (see Agent)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from hermes.agent.conversation import Conversation, transcript
from hermes.agent.toolbox import side_loop
from hermes.llm.client import LLMError

if TYPE_CHECKING:
    from hermes.agent.agent import Agent

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


async def run(agent: Agent, conv: Conversation) -> None:
    """Review `conv` for its user's memory; nothing to do where no personal memory may
    be written (a shared group session, or any group with privacy.group_memory: none)."""
    if conv.shared or not agent.personal(conv.home_surface):
        return
    tools = agent.toolbox(conv, conv.home_surface, None).only("memory")
    snapshot = agent.memory_of(conv.user_id).snapshot() or "(memory is empty)"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"{INSTRUCTIONS}\n\n{snapshot}"},
        {"role": "user", "content": transcript(conv.history[-RECENT_MESSAGES:], 12_000)},
    ]
    model = agent.aux_model or agent.model
    try:
        await side_loop(model, messages, tools, MAX_ITERATIONS, temperature=0.2)
    except LLMError as exc:
        logger.warning("memory review failed: %s", exc)
