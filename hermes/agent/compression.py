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
from typing import Any

from hermes.agent.conversation import Conversation, to_new_message, transcript
from hermes.agent.sessions import Sessions
from hermes.agent.toolbox import ToolBox, side_loop
from hermes.llm.client import LLMError
from hermes.llm.types import ChatModel

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


async def compress(
    conv: Conversation,
    *,
    sessions: Sessions,
    model: ChatModel,
    summary_model: ChatModel,
    keep_recent: int,
    flush_tools: ToolBox,
    flush_messages: list[dict[str, Any]],
    provider_note: str = "",
) -> bool:
    """Move `conv` into a child session; False when there is nothing old enough to fold.

    `flush_messages` is the request as the model would see it now, `flush_tools` the
    memory tool it may save with first."""
    start = recent_start(conv.history, keep_recent)
    if start == 0:
        return False
    older, recent = conv.history[:start], conv.history[start:]
    await flush_memory(model, flush_messages, flush_tools)
    summary = await summarize(summary_model, older, conv.id, provider_note)
    sessions.db.conversations.end_session(conv.id, "compression")
    parent = conv.session
    child = sessions.open(
        conv.user_id,
        conv.home_surface,
        parent.session_key,
        parent_id=parent.id,
        shared=conv.shared,
    )
    opening = [{"role": "user", "content": f"{SUMMARY_PREFIX}\n{summary}"}, *recent]
    sessions.db.conversations.add_messages(child.id, [to_new_message(m) for m in opening])
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


async def flush_memory(model: ChatModel, request: list[dict[str, Any]], tools: ToolBox) -> None:
    if not tools.schemas:  # memory is not among the person's tools
        return
    messages = [*request, {"role": "user", "content": FLUSH_NOTE}]
    try:
        await side_loop(model, messages, tools, FLUSH_ITERATIONS)
    except LLMError as exc:
        logger.warning("memory flush before compression failed: %s", exc)


async def summarize(
    model: ChatModel, older: list[dict[str, Any]], session_id: str, provider_note: str = ""
) -> str:
    """`provider_note`: what the memory provider asks the summary to keep (on_pre_compress)."""
    instructions = SUMMARY_INSTRUCTIONS
    if provider_note:
        instructions += f"\n\nAlso keep in mind (from long-term memory):\n{provider_note}"
    messages = [
        {"role": "system", "content": instructions},
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
