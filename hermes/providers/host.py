"""The host side of the provider seam: every provider call bounded in time, isolated.

A slow provider cannot hold a turn: `prefetch` gets PREFETCH_TIMEOUT_S and the turn
goes on without it; the calls after a reply, on memory writes and at session ends run
as background tasks with CALL_TIMEOUT_S each. An exception from a provider is logged
and swallowed: the built-in memory and the conversation never depend on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from hermes.providers.base import MemoryProvider, MemoryWrite, NoProvider, ProviderSession

logger = logging.getLogger(__name__)

PREFETCH_TIMEOUT_S = 3.0
CALL_TIMEOUT_S = 30.0
MAX_RECALL_CHARS = 4_000


class ProviderHost:
    def __init__(
        self,
        provider: MemoryProvider | None = None,
        *,
        prefetch_timeout: float = PREFETCH_TIMEOUT_S,
        call_timeout: float = CALL_TIMEOUT_S,
    ) -> None:
        self.provider: MemoryProvider = provider or NoProvider()
        self.active = not isinstance(self.provider, NoProvider)  # built-in only: no calls
        self.prefetch_timeout, self.call_timeout = prefetch_timeout, call_timeout
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self.provider.name

    def prompt_block(self, session: ProviderSession) -> str:
        if not self.active:
            return ""
        try:
            return self.provider.system_prompt_block(session).strip()
        except Exception:
            logger.exception("memory provider %s: system_prompt_block failed", self.name)
            return ""

    async def recall(self, query: str, session: ProviderSession) -> str:
        """The provider's recall for this turn, or '' when it is slow or fails."""
        if not self.active:
            return ""
        try:
            text = await asyncio.wait_for(
                self.provider.prefetch(query, session), self.prefetch_timeout
            )
        except TimeoutError:
            logger.warning(
                "memory provider %s: prefetch over %gs", self.name, self.prefetch_timeout
            )
            return ""
        except Exception:
            logger.exception("memory provider %s: prefetch failed", self.name)
            return ""
        return (text or "").strip()[:MAX_RECALL_CHARS]

    def turn_done(
        self,
        user_text: str,
        assistant_text: str,
        session: ProviderSession,
        messages: list[dict[str, Any]],
    ) -> None:
        if not self.active:
            return
        self._background(
            "sync_turn",
            self.provider.sync_turn(user_text, assistant_text, session, list(messages)),
        )

    def memory_written(self, write: MemoryWrite) -> None:
        """Called from any thread (memory writes run off the event loop)."""
        if not self.active:
            return
        try:
            self.provider.on_memory_write(write)
        except Exception:
            logger.exception("memory provider %s: on_memory_write failed", self.name)

    def session_ended(self, session: ProviderSession, messages: list[dict[str, Any]]) -> None:
        if not self.active:
            return
        self._background("on_session_end", self.provider.on_session_end(session, list(messages)))

    def _background(self, what: str, call: Awaitable[None]) -> None:
        async def bounded() -> None:
            try:
                await asyncio.wait_for(call, self.call_timeout)
            except Exception:
                logger.exception("memory provider %s: %s failed", self.name, what)

        try:
            task = asyncio.get_running_loop().create_task(bounded())
        except RuntimeError:  # no loop (a synchronous caller): run it to completion here
            asyncio.run(bounded())
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout: float = 30.0) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)


__all__ = ["ProviderHost"]
