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
from hermes.agent.prompt import build_system_prompt, fence_recall, load_persona, turn_context
from hermes.agent.toolbox import Tool, ToolBox
from hermes.config import AgentConfig, MemoryConfig
from hermes.llm.client import LLMError
from hermes.llm.types import ChatModel, ModelReply
from hermes.memory.service import MemoryService
from hermes.memory.tool import MEMORY_TOOL_SCHEMA
from hermes.memory.user_memory import UserMemory
from hermes.providers.base import AgentContext, ProviderSession
from hermes.providers.host import ProviderHost
from hermes.state.db import NewMessage, SessionDB, new_session_id
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
class Speaker:
    """The person writing a turn, when that is not simply the session's user."""

    user_id: str
    name: str


@dataclass(frozen=True, slots=True)
class TurnResult:
    text: str
    ok: bool
    session_id: str
    duplicate: bool = False
    compressed_from: str | None = None
    reply_id: int | None = None  # the stored assistant message (delivery records on it)


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
    group_memory: bool = True  # privacy.group_memory: personal stores in group chats
    memory: MemoryService | None = None  # the one memory write path (default: built here)
    _reviews: dict[str, asyncio.Task[None]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.memory is None:
            model = self.aux_model or self.model
            self.memory = MemoryService(self.home, self.memory_config, self.db, model=model)

    @property
    def memories(self) -> MemoryService:
        assert self.memory is not None  # set in __post_init__
        return self.memory

    @property
    def providers(self) -> ProviderHost:
        return self.memories.providers

    # -- sessions ------------------------------------------------------------------

    def memory_of(self, user_id: str) -> UserMemory:
        return self.memories.of(user_id)

    def fresh_prompt(
        self, user_id: str, surface: Surface | None = None, *, shared: bool = False
    ) -> str:
        """A shared session belongs to a chat, not a person: no personal store in it."""
        personal = self.personal(surface) and not shared
        snapshot = self.memory_of(user_id).snapshot() if personal else ""
        return build_system_prompt(load_persona(self.home), snapshot)

    def _provider_session(
        self, conv: Conversation, context: AgentContext = AgentContext.PRIMARY
    ) -> ProviderSession:
        return ProviderSession(conv.id, conv.user_id, conv.session.platform, context)

    def personal(self, surface: Surface | None) -> bool:
        """Whether personal memory is used here: always in DMs and the CLI; in groups
        only with privacy.group_memory: full."""
        return self.group_memory or surface is None or surface.chat_type == "dm"

    def open(
        self,
        user_id: str,
        surface: Surface,
        session_key: str,
        parent_id: str | None = None,
        *,
        shared: bool = False,
    ) -> Conversation:
        """A new session whose system prompt is built now and frozen. `user_id` owns it:
        the person, or for a shared group session the chat's owner (`shared`). The
        memory provider's static block is part of the frozen prompt."""
        prompt = self.fresh_prompt(user_id, surface, shared=shared)
        session_id = new_session_id()
        if not shared:
            block = self.providers.prompt_block(
                ProviderSession(session_id, user_id, surface.platform)
            )
            prompt = f"{prompt}\n\n{block}" if block else prompt
        session = self.db.start_session(
            user_id,
            surface.platform,
            session_key,
            session_id=session_id,
            chat_type=surface.chat_type,
            chat_id=surface.chat_id,
            thread_id=surface.thread_id,
            shared=shared,
            parent_session_id=parent_id,
            system_prompt=prompt,
        )
        return Conversation(session, prompt)

    def end(self, conv: Conversation, reason: str) -> None:
        """End a session for real (/new, idle): the provider hears of it."""
        self.db.end_session(conv.id, reason)
        self.providers.session_ended(self._provider_session(conv), conv.history)

    def for_key(
        self, user_id: str, surface: Surface, session_key: str, *, shared: bool = False
    ) -> Conversation:
        """The open session of a key, or a new one pointing at the one that ended."""
        open_, ended = self.db.session_for_key(user_id, session_key)
        if open_ is not None:
            resumed = self.resume(user_id, open_.id)
            if resumed is not None:
                return resumed
        conv = self.open(user_id, surface, session_key, shared=shared)
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
            surface = Surface(session.platform, session.chat_type)
            prompt = self.fresh_prompt(user_id, surface, shared=session.shared)
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
        *,
        speaker: Speaker | None = None,
    ) -> TurnResult:
        """One turn. `speaker` is the person writing when it is not the session's user
        (a shared group session): their words are marked with their name, and a memory
        they ask for goes to their own store."""
        if conv.shared:
            text = f"[{speaker.name if speaker else 'someone'}] {text}"
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
        writer = speaker.user_id if speaker else (None if conv.shared else conv.user_id)
        tools = self.toolbox(conv, surface, cause, writer=writer)
        recalled = await self.providers.recall(text, self._provider_session(conv))
        if recalled:
            context = f"{context}\n{fence_recall(recalled)}"
        try:
            answer, reply_id = await self._loop(conv, tools, context)
        except LLMError as exc:
            return TurnResult(
                f"{exc} {SAVED_NOTE}", False, conv.id, compressed_from=compressed_from
            )
        self._schedule_review(conv)
        self.providers.turn_done(text, answer, self._provider_session(conv), conv.history)
        notices = self.db.take_notices(conv.user_id)
        if notices:  # e.g. "I tidied your memory ... /memory undo reverts it"
            answer = "\n\n".join([answer, *notices])
        return TurnResult(answer, True, conv.id, compressed_from=compressed_from, reply_id=reply_id)

    def toolbox(
        self,
        conv: Conversation,
        surface: Surface,
        cause: int | None,
        *,
        writer: str | None = None,
    ) -> ToolBox:
        """The turn's tools; memory writes go to `writer`'s stores (default: the
        session's user; nobody's in a shared session without a known speaker)."""
        owner = writer if writer is not None else (None if conv.shared else conv.user_id)

        async def remember(args: dict[str, Any]) -> dict[str, Any]:
            if not self.personal(surface) or owner is None:
                return {"success": False, "error": GROUP_MEMORY_OFF}
            outcome = await self.memories.apply(
                owner, args, actor="agent", session_id=conv.id, message_id=cause
            )
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

    async def _loop(
        self, conv: Conversation, tools: ToolBox, context: str
    ) -> tuple[str, int | None]:
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

    def _finish(self, conv: Conversation, reply: ModelReply) -> tuple[str, int | None]:
        """The answer's text and its stored id."""
        text = (reply.content or "").strip()
        message = {"role": "assistant", "content": text}
        conv.append([message])
        (stored,) = self._persist(conv, [message], reply)
        return text, stored

    def _persist(
        self, conv: Conversation, messages: list[dict[str, Any]], reply: ModelReply
    ) -> list[int | None]:
        rows: list[NewMessage] = [to_new_message(m) for m in messages]
        usage = (reply.prompt_tokens or 0, reply.completion_tokens or 0)
        return self.db.add_messages(conv.id, rows, usage=usage)

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
        self.memories.request_check(user_id)

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait for background work (e.g. before a one-shot CLI exits)."""
        if self._reviews:
            await asyncio.wait(list(self._reviews.values()), timeout=timeout)
        await self.memories.drain(timeout)


__all__ = ["Agent", "Speaker", "Surface", "TurnResult"]
