"""The agent: sessions with a frozen prompt, and the tool-calling turn loop.

For each user message: persist it (so a failure loses nothing), call the model with the
frozen system prompt + history + tools, run tool calls in order, persist assistant and
tool messages, repeat until a text answer or the tool-iteration cap.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hermes.agent import compression, review
from hermes.agent.conversation import Conversation, Surface, to_new_message, to_openai
from hermes.agent.prompt import build_system_prompt, load_persona, turn_context
from hermes.agent.toolbox import Tool, ToolBox
from hermes.config import AgentConfig, MemoryConfig
from hermes.llm.client import LLMError
from hermes.llm.types import ChatModel, ModelReply
from hermes.memory import sweep
from hermes.memory.journal import run_recorded
from hermes.memory.tool import MEMORY_TOOL_SCHEMA, MemoryTool
from hermes.memory.user_memory import UserMemory
from hermes.state.db import NewMessage, SessionDB
from hermes.state.models import ChatSession
from hermes.state.search import SearchScope
from hermes.tools.session_search import SessionSearchTool, Summarizer, SummaryPolicy

logger = logging.getLogger(__name__)

FINAL_ANSWER_NOTE = (
    "[The tool-call budget for this turn is used up. Answer the user now with what you "
    "have, without calling tools.]"
)
SAVED_NOTE = "Your message was saved; try again."
GROUP_MEMORY_OFF = (
    "Memory is off in group chats here (privacy.group_memory: none); nothing was saved. "
    "The user can tell you again in a direct message."
)


def previous_pointer(ended: ChatSession) -> str:
    when = f"{ended.last_active_at:%Y-%m-%d}"
    return (
        f'[previous conversation: session {ended.id} "{ended.title}" ({when}, ended '
        f"{ended.end_reason or 'earlier'}); session_search can find what was said there]"
    )


@dataclass(frozen=True, slots=True)
class TurnResult:
    text: str
    ok: bool
    session_id: str
    duplicate: bool = False
    compressed_from: str | None = None


@dataclass
class Agent:
    db: SessionDB
    model: ChatModel
    home: Path
    memory_config: MemoryConfig = field(default_factory=MemoryConfig)
    config: AgentConfig = field(default_factory=AgentConfig)
    aux_model: ChatModel | None = None  # compression summaries and memory review
    search_summarizer: Summarizer | None = None
    search_policy: SummaryPolicy = field(default_factory=SummaryPolicy)
    auto_consolidate: bool = True  # check a store right after a write takes it past 80 %
    group_memory: bool = True  # privacy.group_memory: personal stores in group chats
    _reviews: dict[str, asyncio.Task[None]] = field(default_factory=dict, repr=False)
    _checks: dict[str, asyncio.Task[Any]] = field(default_factory=dict, repr=False)

    # -- sessions ------------------------------------------------------------------

    def memory_of(self, user_id: str) -> UserMemory:
        return UserMemory(self.home, user_id, self.memory_config)

    def fresh_prompt(self, user_id: str, surface: Surface | None = None) -> str:
        snapshot = self.memory_of(user_id).snapshot() if self.personal(surface) else ""
        return build_system_prompt(load_persona(self.home), snapshot)

    def personal(self, surface: Surface | None) -> bool:
        """Whether personal memory is used here: always in DMs and the CLI; in groups
        only with privacy.group_memory: full."""
        return self.group_memory or surface is None or surface.chat_type == "dm"

    def open(
        self, user_id: str, surface: Surface, session_key: str, parent_id: str | None = None
    ) -> Conversation:
        """A new session whose system prompt is built now and frozen."""
        prompt = self.fresh_prompt(user_id, surface)
        session = self.db.start_session(
            user_id,
            surface.platform,
            session_key,
            chat_type=surface.chat_type,
            chat_id=surface.chat_id,
            thread_id=surface.thread_id,
            parent_session_id=parent_id,
            system_prompt=prompt,
        )
        return Conversation(session, prompt)

    def for_key(self, user_id: str, surface: Surface, session_key: str) -> Conversation:
        """The open session of a key, or a new one pointing at the one that ended."""
        open_, ended = self.db.session_for_key(user_id, session_key)
        if open_ is not None:
            resumed = self.resume(user_id, open_.id)
            if resumed is not None:
                return resumed
        conv = self.open(user_id, surface, session_key)
        if ended is not None:
            conv.pointer = previous_pointer(ended)
        return conv

    def resume(self, user_id: str, session_id: str) -> Conversation | None:
        """Continue a session (of this user only) with the same prompt bytes and history."""
        session = self.db.get_session(session_id, user_id)
        if session is None:
            return None
        prompt = self.db.system_prompt(session.system_prompt_hash or "")
        if prompt is None:
            prompt = self.fresh_prompt(user_id, Surface(session.platform, session.chat_type))
        history = [to_openai(m) for m in self.db.messages(session.id, user_id)]
        return Conversation(session, prompt, history)

    # -- the turn ----------------------------------------------------------------------

    async def turn(
        self,
        conv: Conversation,
        text: str,
        surface: Surface,
        platform_message_id: str | None = None,
        recall: str = "",
    ) -> TurnResult:
        user_message = {"role": "user", "content": text}
        compressed_from = None
        if conv.projected_tokens([user_message]) > self.config.context_budget_tokens:
            compressed_from = conv.id
            await compression.compress(self, conv, surface)
        cause = self.db.add_message(conv.id, to_new_message(user_message, platform_message_id))
        if cause is None:
            return TurnResult("", True, conv.id, duplicate=True)
        conv.append([user_message])
        context = turn_context(surface.platform, surface.chat_type, datetime.now(UTC), recall)
        if conv.pointer:
            context, conv.pointer = f"{context}\n{conv.pointer}", ""
        tools = self.toolbox(conv, surface, cause)
        try:
            answer = await self._loop(conv, tools, context)
        except LLMError as exc:
            return TurnResult(
                f"{exc} {SAVED_NOTE}", False, conv.id, compressed_from=compressed_from
            )
        self._schedule_review(conv)
        notices = self.db.take_notices(conv.user_id)
        if notices:  # e.g. "I tidied your memory ... /memory undo reverts it"
            answer = "\n\n".join([answer, *notices])
        return TurnResult(answer, True, conv.id, compressed_from=compressed_from)

    def toolbox(self, conv: Conversation, surface: Surface, cause: int | None) -> ToolBox:
        memory = self.memory_of(conv.user_id)

        async def remember(args: dict[str, Any]) -> dict[str, Any]:
            if not self.personal(surface):
                return {"success": False, "error": GROUP_MEMORY_OFF}
            outcome = await asyncio.to_thread(
                run_recorded,
                MemoryTool(memory),
                self.db,
                args,
                actor="agent",
                session_id=conv.id,
                message_id=cause,
            )
            change = outcome.change
            if change is not None and sweep.crosses_threshold(
                change.used_before,
                change.used_after,
                memory.store(change.target).limit,
                self.memory_config.consolidation.threshold,
            ):
                self.check_memory(conv.user_id)
            return outcome.result

        chat_id = surface.chat_id if surface.chat_type != "dm" else None
        scope = SearchScope(conv.user_id, chat_id=chat_id, exclude_session_id=conv.id)
        search = SessionSearchTool(self.db, scope, self.search_summarizer, self.search_policy)
        return ToolBox(
            [
                Tool("memory", MEMORY_TOOL_SCHEMA, remember),
                Tool(search.name, search.schema, search.run),
            ]
        )

    async def _loop(self, conv: Conversation, tools: ToolBox, context: str) -> str:
        for _ in range(self.config.max_tool_iterations):
            reply = await self._call(conv, context, tools)
            if not reply.tool_calls:
                return self._finish(conv, reply)
            await self._run_tools(conv, tools, reply)
        reply = await self._call(conv, context, None, note=FINAL_ANSWER_NOTE)
        return self._finish(conv, reply)

    async def _call(
        self, conv: Conversation, context: str, tools: ToolBox | None, note: str | None = None
    ) -> ModelReply:
        messages = self.request_messages(conv, context)
        if note:
            messages.append({"role": "user", "content": note})
        reply = await self.model.chat(messages, tools.schemas if tools else None)
        conv.mark_sent(reply.prompt_tokens)
        return reply

    def request_messages(self, conv: Conversation, context: str) -> list[dict[str, Any]]:
        """System prompt + history, the latest user message carrying the turn's context."""
        history = list(conv.history)
        last_user = max((i for i, m in enumerate(history) if m["role"] == "user"), default=None)
        if last_user is not None:
            message = history[last_user]
            history[last_user] = {**message, "content": f"{message['content']}\n\n{context}"}
        return [{"role": "system", "content": conv.system_prompt}, *history]

    async def _run_tools(self, conv: Conversation, tools: ToolBox, reply: ModelReply) -> None:
        call_message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.content or None,
            "tool_calls": [call.as_openai() for call in reply.tool_calls],
        }
        results = []
        for call in reply.tool_calls:  # in order: a later call may depend on an earlier one
            content = await tools.execute(call)
            results.append(
                {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
            )
        # added together, so a turn cancelled mid-tools leaves no call without its results
        conv.append([call_message, *results])
        self._persist(conv, [call_message, *results], reply)

    def _finish(self, conv: Conversation, reply: ModelReply) -> str:
        text = (reply.content or "").strip()
        message = {"role": "assistant", "content": text}
        conv.append([message])
        self._persist(conv, [message], reply)
        return text

    def _persist(
        self, conv: Conversation, messages: list[dict[str, Any]], reply: ModelReply
    ) -> None:
        rows: list[NewMessage] = [to_new_message(m) for m in messages]
        self.db.add_messages(
            conv.id, rows, usage=(reply.prompt_tokens or 0, reply.completion_tokens or 0)
        )

    # -- background memory review ---------------------------------------------------------

    def _schedule_review(self, conv: Conversation) -> None:
        interval = self.memory_config.review_interval
        user_turns = sum(1 for m in conv.history if m["role"] == "user")
        if not interval or user_turns % interval or conv.user_id in self._reviews:
            return
        task = asyncio.create_task(review.run(self, conv))
        self._reviews[conv.user_id] = task
        task.add_done_callback(functools.partial(self._review_done, conv.user_id))

    def _review_done(self, user_id: str, _task: asyncio.Task[None]) -> None:
        self._reviews.pop(user_id, None)

    def check_memory(self, user_id: str) -> None:
        """Consolidate this user's stores over the threshold, in the background."""
        if not self.auto_consolidate or user_id in self._checks:
            return
        model = self.aux_model or self.model
        task = asyncio.create_task(
            sweep.check(self.home, self.db, model, self.memory_config, [user_id])
        )
        self._checks[user_id] = task
        task.add_done_callback(functools.partial(self._check_done, user_id))

    def _check_done(self, user_id: str, _task: asyncio.Task[Any]) -> None:
        self._checks.pop(user_id, None)

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait for background work (e.g. before a one-shot CLI exits)."""
        pending = [*self._reviews.values(), *self._checks.values()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)


__all__ = ["Agent", "Surface", "TurnResult"]
