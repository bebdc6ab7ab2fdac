"""Session lifecycle: open, continue, resume and end sessions, each with a frozen prompt.

A session's system prompt (persona + memory snapshot + memory guidance + the memory
provider's static block) is built once, when the session opens, stored by hash, and
sent byte-identical on every request (prefix caching), also when the session is
resumed on another surface. A session belongs to one user: a person, or for a shared
group session (`group_scope: per_chat`) the chat's owner, whose prompt carries no
personal store. The turn itself lives in agent.py.
"""

from __future__ import annotations

from pathlib import Path

from hermes.agent.conversation import Conversation, to_openai
from hermes.agent.prompt import build_system_prompt, load_persona
from hermes.memory.service import MemoryService
from hermes.places import Surface
from hermes.providers.base import AgentContext, ProviderSession
from hermes.state.conversations import new_session_id
from hermes.state.db import SessionDB
from hermes.state.models import ChatSession


def previous_pointer(ended: ChatSession) -> str:
    when = f"{ended.last_active_at:%Y-%m-%d}"
    return (
        f'[previous conversation: session {ended.id} "{ended.title}" ({when}, ended '
        f"{ended.end_reason or 'earlier'}); session_search can find what was said there]"
    )


class Sessions:
    def __init__(
        self, db: SessionDB, home: Path, memory: MemoryService, *, group_memory: bool = True
    ) -> None:
        self.db, self.home, self.memory = db, home, memory
        self.group_memory = group_memory  # privacy.group_memory: personal stores in groups

    def personal(self, surface: Surface | None) -> bool:
        """Whether personal memory is used here: always in DMs and the CLI; in groups
        only with privacy.group_memory: full."""
        return self.group_memory or surface is None or surface.chat_type == "dm"

    def fresh_prompt(
        self, user_id: str, surface: Surface | None = None, *, shared: bool = False
    ) -> str:
        """A shared session belongs to a chat, not a person: no personal store in it."""
        personal = self.personal(surface) and not shared
        snapshot = self.memory.of(user_id).snapshot() if personal else ""
        threshold = self.memory.config.consolidation.threshold
        return build_system_prompt(load_persona(self.home), snapshot, threshold)

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
        the person, or for a shared group session the chat's owner (`shared`)."""
        prompt = self.fresh_prompt(user_id, surface, shared=shared)
        session_id = new_session_id()
        if not shared:  # a shared session belongs to a chat: no provider identity in it
            block = self.memory.providers.session_started(
                ProviderSession(session_id, user_id, surface.platform),
                parent_session_id=parent_id,
                reason="compression" if parent_id else "new",
            )
            prompt = f"{prompt}\n\n{block}" if block else prompt
        session = self.db.conversations.start_session(
            user_id,
            surface.platform,
            session_key,
            session_id=session_id,
            chat_type=surface.kind,
            chat_id=surface.chat_id,
            thread_id=surface.thread_id,
            shared=shared,
            parent_session_id=parent_id,
            system_prompt=prompt,
        )
        return Conversation(session, prompt)

    def for_key(
        self, user_id: str, surface: Surface, session_key: str, *, shared: bool = False
    ) -> Conversation:
        """The open session of a key, or a new one pointing at the one that ended."""
        open_, ended = self.db.conversations.session_for_key(user_id, session_key)
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
        session = self.db.conversations.get_session(session_id, user_id)
        if session is None:
            return None
        prompt = self.db.conversations.system_prompt(session.system_prompt_hash or "")
        if prompt is None:
            surface = Surface.recorded(session.platform, session.chat_type)
            prompt = self.fresh_prompt(user_id, surface, shared=session.shared)
        history = [to_openai(m) for m in self.db.conversations.messages(session.id, user_id)]
        conv = Conversation(session, prompt, history)
        if not session.shared:
            self.memory.providers.session_started(
                provider_session(conv), parent_session_id=None, reason="resume"
            )
        return conv

    def end(self, conv: Conversation, reason: str) -> None:
        """End a session for real (/new, idle): the memory provider hears of it."""
        self.db.conversations.end_session(conv.id, reason)
        self.memory.providers.session_ended(provider_session(conv), conv.history)


def provider_session(
    conv: Conversation, context: AgentContext = AgentContext.PRIMARY
) -> ProviderSession:
    return ProviderSession(conv.id, conv.user_id, conv.session.platform, context)


__all__ = ["Sessions", "previous_pointer", "provider_session"]
