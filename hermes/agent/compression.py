"""Keeping long conversations bounded.

When a session's context passes the budget: give the model one memory-only turn to save
what matters, summarize the older turns with the auxiliary model, end the session with
`end_reason=compression` and continue in a child session that starts with the summary
plus the recent turns, under a fresh system prompt (a new memory snapshot: the prefix
cache is invalidated anyway, so this is when memory written meanwhile enters the prompt).
Nothing is lost: the parent session keeps every message.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from hermes.agent.conversation import Conversation, Surface, to_new_message, transcript
from hermes.agent.toolbox import side_loop
from hermes.llm.client import LLMError

if TYPE_CHECKING:
    from hermes.agent.agent import Agent

logger = logging.getLogger(__name__)

FLUSH_NOTE = (
    "[The conversation is about to be compressed: older turns will be replaced by a short "
    "summary. Save durable facts worth keeping (preferences, corrections, environment "
    "facts, decisions) with the memory tool now, then reply 'ok'.]"
)
SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation below for the assistant who will continue it. Keep what "
    "the next turns may need: the user's goals, decisions, facts, open questions, names, "
    "numbers and dates. Be compact (at most 12 short lines); no preamble."
)
SUMMARY_PREFIX = "[Summary of the earlier part of this conversation]"
SUMMARY_INPUT_CHARS = 40_000
FLUSH_ITERATIONS = 3


async def compress(agent: Agent, conv: Conversation, surface: Surface) -> bool:
    """Move `conv` into a child session; False when there is nothing old enough to fold."""
    start = recent_start(conv.history, agent.config.keep_recent_messages)
    if start == 0:
        return False
    older, recent = conv.history[:start], conv.history[start:]
    await flush_memory(agent, conv, surface)
    summary = await summarize(agent, older, conv.id)
    agent.db.end_session(conv.id, "compression")
    parent = conv.session
    child = agent.open(
        conv.user_id,
        conv.home_surface,
        parent.session_key,
        parent_id=parent.id,
        shared=conv.shared,
    )
    opening = [{"role": "user", "content": f"{SUMMARY_PREFIX}\n{summary}"}, *recent]
    agent.db.add_messages(child.id, [to_new_message(m) for m in opening])
    conv.session, conv.system_prompt = child.session, child.system_prompt
    conv.history, conv.unsent, conv.last_prompt_tokens = opening, [], None
    logger.info("session %s compressed into %s", parent.id, child.id)
    return True


def recent_start(history: list[dict[str, Any]], keep: int) -> int:
    """Where the verbatim tail begins: at most `keep` messages, starting at a user turn."""
    for index in range(max(0, len(history) - keep), len(history)):
        if history[index]["role"] == "user":
            return index
    return max((i for i, m in enumerate(history) if m["role"] == "user"), default=0)


async def flush_memory(agent: Agent, conv: Conversation, surface: Surface) -> None:
    tools = agent.toolbox(conv, surface, None).only("memory")
    messages = [*agent.request_messages(conv, ""), {"role": "user", "content": FLUSH_NOTE}]
    try:
        await side_loop(agent.model, messages, tools, FLUSH_ITERATIONS)
    except LLMError as exc:
        logger.warning("memory flush before compression failed: %s", exc)


async def summarize(agent: Agent, older: list[dict[str, Any]], session_id: str) -> str:
    model = agent.aux_model or agent.model
    messages = [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": transcript(older, SUMMARY_INPUT_CHARS)},
    ]
    try:
        reply = await model.chat(messages, None, temperature=0.2)
    except LLMError as exc:
        logger.warning("summary for compression failed: %s", exc)
        reply = None
    if reply is None or not (reply.content or "").strip():
        return f"(No summary could be written; the earlier messages are in session {session_id}.)"
    return (reply.content or "").strip()
