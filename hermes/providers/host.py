"""The host side of the provider seam: every provider call bounded, ordered and isolated.

- One instance per person (`factory()` once per user id, initialized with our user id):
  two people never share a provider identity.
- `memory.recall_mode` is enforced here, not by each provider: `context` injects
  prefetch results and offers no provider tools, `tools` the reverse, `hybrid` both.
- Prefetch gets `memory.prefetch_timeout_ms`; past it the turn goes on without it (a
  log line, a counter). Trivial prompts (greetings, "ok", slash commands) skip it.
- Everything after the reply (sync_turn, queue_prefetch, memory writes, session
  switches and ends) runs on one background worker per person, in FIFO order, each
  call bounded by `call_timeout`; `shutdown` drains them within a bound.
- A provider that raises or hangs is logged and skipped: a turn never fails because of
  it. Only the primary agent context writes (review, compression and scheduler
  contexts never sync).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import re
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes import metrics
from hermes.providers import registry
from hermes.providers.base import (
    AgentContext,
    MemoryProvider,
    MemoryWrite,
    NoProvider,
    ProviderFactory,
    ProviderSession,
    RecallMode,
)

logger = logging.getLogger(__name__)


PREFETCH_TIMEOUT_S = 0.8
CALL_TIMEOUT_S = 30.0
MAX_RECALL_CHARS = 4_000
MAX_TOOL_RESULT_CHARS = 16_000

# greetings and acknowledgements in the languages people write here; a turn made only of
# these (or of punctuation and emoji, or a slash command) asks nothing worth recalling
_TRIVIAL_WORDS = frozenset(
    """hi hello hey yo hiya howdy ok okay k kk sure yes yeah yep no nope nah thanks thank you
    thx ty cheers bye goodbye night morning good great cool nice fine lol haha hmm alright
    right got it np welcome 안녕 안녕하세요 네 예 응 아니 아니요 고마워 고마워요 감사합니다
    감사해요 좋아 오케이 ㅇㅋ ㅋㅋ 你好 您好 嗯 好 好的 是 不 谢谢 谢了 再见 行 对 こんにちは
    こんばんは おはよう はい いいえ うん ありがとう どうも 了解 hola gracias vale sí si
    hallo danke ja nein tschüss bonjour merci oui non salut привет спасибо да нет ок""".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)


def is_trivial(text: str) -> bool:
    """A prompt that needs no recall: a slash command, nothing but punctuation or emoji,
    or at most three words that are all greetings or acknowledgements."""
    stripped = text.strip()
    if not stripped or stripped.startswith("/"):
        return True
    words = [w.casefold() for w in _WORD.findall(stripped)]
    return not words or (len(words) <= 3 and all(w in _TRIVIAL_WORDS for w in words))


@dataclass(frozen=True, slots=True)
class ProviderStatus:
    name: str
    active: bool
    available: bool
    reason: str  # why it is not available
    recall_mode: RecallMode
    last_recall: int | None  # items the person's last prefetch returned (None: none yet)
    skipped: int  # prefetches skipped (timeout or failure) since start


class ProviderMergeError(Exception):
    """A provider could not move a linked person's data."""


class ProviderHost:
    def __init__(
        self,
        factory: ProviderFactory | None = None,
        *,
        home: Path | None = None,
        recall_mode: RecallMode | str = RecallMode.HYBRID,
        prefetch_timeout: float = PREFETCH_TIMEOUT_S,
        call_timeout: float = CALL_TIMEOUT_S,
        core_tools: Iterable[str] = ("memory", "session_search"),
    ) -> None:
        self.factory = factory
        self.home = home or Path.home() / ".hermes"
        self.recall_mode = RecallMode(recall_mode)
        self.prefetch_timeout, self.call_timeout = prefetch_timeout, call_timeout
        self.core_tools = frozenset(core_tools)
        self._probed: _Probe | None = None  # the provider is made when first needed
        self._probing = threading.Lock()
        self._instances: dict[str, MemoryProvider] = {}
        self._workers: dict[str, _Worker] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sync_calls = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="memory-provider"
        )
        self._refused_tools: set[str] = set()
        self.last_recall: dict[str, int] = {}
        self.skipped = 0

    # -- which provider, and can it answer (asked once, when first needed: a command
    # -- that never touches the provider never imports its plugin) -------------------

    @property
    def name(self) -> str:
        return self.probe().name

    @property
    def available(self) -> bool:
        return self.probe().available

    @property
    def reason(self) -> str:
        return self.probe().reason

    @property
    def active(self) -> bool:
        return self.probe().active

    def probe(self) -> _Probe:
        """Make the provider once and ask whether it can answer (the gateway asks at start)."""
        if self._probed is not None:
            return self._probed
        with self._probing:
            if self._probed is None:
                self._probed = _probe(self.factory)
        return self._probed

    # -- sessions ----------------------------------------------------------------------

    def session_started(
        self, session: ProviderSession, *, parent_session_id: str | None, reason: str
    ) -> str:
        """A session starts ('new', 'compression') or resumes ('resume'): the person's
        instance is initialized for it; returns the static block for a new session's
        frozen prompt ('' for a resumed one: its prompt is already frozen)."""
        if not self.active:
            return ""
        provider = self._instance(session.user_id)
        if provider is None:
            return ""

        def start() -> str:
            provider.initialize(
                session.session_id,
                hermes_home=self.home,
                platform=session.platform,
                user_id=session.user_id,
                agent_context=session.agent_context.value,
            )
            return provider.system_prompt_block() if reason != "resume" else ""

        block = self._bounded_sync("initialize", start, "")
        self._enqueue(
            session.user_id,
            "on_session_switch",
            lambda: provider.on_session_switch(
                session.session_id, parent_session_id=parent_session_id, reason=reason
            ),
        )
        return (block or "").strip()

    def session_ended(self, session: ProviderSession, messages: list[dict[str, Any]]) -> None:
        provider = self._writer(session)
        if provider is not None:
            history = list(messages)
            self._enqueue(
                session.user_id, "on_session_end", lambda: provider.on_session_end(history)
            )

    async def pre_compress(self, session: ProviderSession, messages: list[dict[str, Any]]) -> str:
        """Text the provider adds to the compression summary prompt ('' on failure)."""
        provider = self._instance(session.user_id) if self.active else None
        if provider is None:
            return ""
        try:
            text = await asyncio.wait_for(
                provider.on_pre_compress(list(messages)), self.call_timeout
            )
        except Exception:
            logger.exception("memory provider %s: on_pre_compress failed", self.name)
            return ""
        return (text or "").strip()[:MAX_RECALL_CHARS]

    # -- turns -------------------------------------------------------------------------

    async def recall(self, query: str, session: ProviderSession) -> str:
        """The provider's recall for this turn, or '' (mode `tools`, a trivial prompt,
        too slow, failed)."""
        if not self.active or self.recall_mode is RecallMode.TOOLS or is_trivial(query):
            return ""
        provider = self._instance(session.user_id)
        if provider is None:
            return ""
        self._loop = asyncio.get_running_loop()
        try:
            text = await asyncio.wait_for(
                provider.prefetch(query, session_id=session.session_id), self.prefetch_timeout
            )
        except TimeoutError:
            self._skip("timeout")
            logger.warning(
                "memory provider %s: prefetch over %g ms, skipped for this turn",
                self.name,
                self.prefetch_timeout * 1000,
            )
            return ""
        except Exception:
            self._skip("error")
            logger.exception("memory provider %s: prefetch failed", self.name)
            return ""
        recalled = (text or "").strip()[:MAX_RECALL_CHARS] if isinstance(text, str) else ""
        self.last_recall[session.user_id] = sum(1 for line in recalled.splitlines() if line.strip())
        return recalled

    def turn_done(
        self,
        user_text: str,
        assistant_text: str,
        session: ProviderSession,
        messages: list[dict[str, Any]],
    ) -> None:
        """After the reply: sync the turn, then warm the next prefetch (background)."""
        provider = self._writer(session)
        if provider is None:
            return
        history, sid = list(messages), session.session_id
        self._enqueue(
            session.user_id,
            "sync_turn",
            lambda: provider.sync_turn(user_text, assistant_text, session_id=sid, messages=history),
        )
        if self.recall_mode is not RecallMode.TOOLS and not is_trivial(user_text):
            self._enqueue(
                session.user_id,
                "queue_prefetch",
                lambda: provider.queue_prefetch(user_text, session_id=sid),
            )

    def people_merged(self, keep: str, gone: str) -> None:
        """Two people were linked (`gone` is `keep` from now on): every provider that keeps
        something per person moves it, the configured one and each shipped one that has
        a store in this home, before the link finishes (it holds the memory gate). An
        error is raised: the link reports it."""
        providers: dict[str, MemoryProvider] = {}
        if self.active and self.factory is not None:
            providers[self.name] = self.factory()
        for name in registry.BUILT_IN:
            if name not in providers:
                providers[name] = registry.load(name, {}, self.home)()
        for name, provider in providers.items():
            try:
                provider.merge_people(keep, gone, self.home)
            except Exception as exc:
                raise ProviderMergeError(f"memory provider {name}: {exc}") from exc
        with self._lock:
            self._instances.pop(gone, None)  # its instance acted for a person who is gone

    def memory_written(self, write: MemoryWrite) -> None:
        """A built-in store changed (add, replace, remove, undo, merge, consolidation);
        called from any thread (memory writes run off the event loop)."""
        provider = self._instance(write.user_id) if self.active else None
        if provider is None:
            return
        metadata = {
            "before": write.before,
            "actor": write.actor,
            "session_id": write.session_id,
            "user_id": write.user_id,
        }

        async def mirror() -> None:
            await asyncio.to_thread(
                provider.on_memory_write,
                write.action,
                write.target,
                write.content,
                metadata=metadata,
            )

        self._enqueue(write.user_id, "on_memory_write", mirror)

    # -- tools -------------------------------------------------------------------------

    def tool_schemas(self, user_id: str) -> list[dict[str, Any]]:
        """The provider's tools for this person (none in recall mode `context`); a tool
        named like a core tool is refused."""
        if not self.active or self.recall_mode is RecallMode.CONTEXT:
            return []
        provider = self._instance(user_id)
        if provider is None:
            return []
        schemas = self._bounded_sync("get_tool_schemas", provider.get_tool_schemas, [])
        offered = []
        for schema in schemas or []:
            name = _tool_name(schema)
            if not name or name in self.core_tools:
                if name not in self._refused_tools:
                    self._refused_tools.add(name)
                    logger.warning(
                        "memory provider %s: tool %r refused (%s)",
                        self.name,
                        name,
                        "shadows a core tool" if name else "no name",
                    )
                continue
            offered.append(schema)
        return offered

    async def call_tool(self, user_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        provider = self._instance(user_id) if self.active else None
        if provider is None:
            return {"success": False, "error": "the memory provider is off"}
        try:
            raw = await asyncio.wait_for(provider.handle_tool_call(name, args), self.call_timeout)
        except TimeoutError:
            logger.warning("memory provider %s: tool %s timed out", self.name, name)
            return {"success": False, "error": f"{name} did not answer in time"}
        except Exception as exc:
            logger.exception("memory provider %s: tool %s failed", self.name, name)
            return {"success": False, "error": f"{name} failed: {type(exc).__name__}"}
        text = str(raw or "")[:MAX_TOOL_RESULT_CHARS]
        try:
            parsed = json.loads(text)
        except ValueError:
            return {"result": text}
        return parsed if isinstance(parsed, dict) else {"result": parsed}

    # -- status and lifecycle ----------------------------------------------------------

    def status(self, user_id: str) -> ProviderStatus:
        return ProviderStatus(
            self.name,
            self.active,
            self.available,
            self.reason,
            self.recall_mode,
            self.last_recall.get(user_id),
            self.skipped,
        )

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait (at most `timeout`) for every person's queued provider calls."""
        workers = list(self._workers.values())
        if workers:
            await asyncio.wait([asyncio.ensure_future(w.idle()) for w in workers], timeout=timeout)

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Drain the queues, then shut every instance down, all within `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self.drain(timeout)
        for worker in list(self._workers.values()):
            worker.stop()
        for provider in list(self._instances.values()):
            left = max(0.1, deadline - loop.time())
            try:
                await asyncio.wait_for(provider.shutdown(), left)
            except Exception:
                logger.exception("memory provider %s: shutdown failed", self.name)
        self._sync_calls.shutdown(wait=False, cancel_futures=True)

    # -- internals ---------------------------------------------------------------------

    def _instance(self, user_id: str) -> MemoryProvider | None:
        """The person's instance; a new one is initialized with their user id at once
        (outside any session: a memory write from the CLI, a merge), so it never acts
        for nobody."""
        with self._lock:
            provider = self._instances.get(user_id)
            if provider is not None or self.factory is None:
                return provider
            try:
                provider = self._instances[user_id] = self.factory()
            except Exception:
                logger.exception("memory provider %s: could not be created", self.name)
                return None
        made = provider

        def start() -> None:
            made.initialize(
                "",
                hermes_home=self.home,
                platform="",
                user_id=user_id,
                agent_context=AgentContext.PRIMARY.value,
            )

        self._bounded_sync("initialize", start, None)
        return provider

    def _writer(self, session: ProviderSession) -> MemoryProvider | None:
        if not self.active or session.agent_context is not AgentContext.PRIMARY:
            return None  # providers write only from the primary context
        return self._instance(session.user_id)

    def _skip(self, reason: str) -> None:
        self.skipped += 1
        metrics.PROVIDER_PREFETCH_SKIPPED.labels(reason).inc()

    def _bounded_sync(self, what: str, call: Callable[[], Any], default: Any) -> Any:
        """A synchronous provider call, bounded by call_timeout (a hung one is left
        behind in its thread; the caller goes on)."""
        try:
            return self._sync_calls.submit(call).result(timeout=self.call_timeout)
        except concurrent.futures.TimeoutError:
            logger.warning("memory provider %s: %s timed out", self.name, what)
        except Exception:
            logger.exception("memory provider %s: %s failed", self.name, what)
        return default

    def _enqueue(self, user_id: str, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        """Run `call` on the person's worker, after what is already queued for them."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another thread (a memory write): hand it to the loop
            other = self._loop
            if other is None or not other.is_running():  # no loop at all (a CLI command)
                self._run_now(what, call)
                return
            other.call_soon_threadsafe(self._enqueue, user_id, what, call)
            return
        self._loop = loop
        worker = self._workers.get(user_id)
        if worker is None or worker.loop is not loop:  # first call, or a new event loop
            worker = self._workers[user_id] = _Worker(self, user_id)
        worker.put(what, call)

    def _run_now(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        async def bounded() -> None:
            await asyncio.wait_for(call(), self.call_timeout)

        try:
            asyncio.run(bounded())
        except Exception:
            logger.exception("memory provider %s: %s failed", self.name, what)


class _Worker:
    """One person's provider calls, one at a time, in the order they were queued."""

    def __init__(self, host: ProviderHost, user_id: str) -> None:
        self.host, self.user_id = host, user_id
        self.queue: asyncio.Queue[tuple[str, Callable[[], Awaitable[Any]]]] = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        self.task = self.loop.create_task(self._run())

    def put(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        self.queue.put_nowait((what, call))

    async def idle(self) -> None:
        await self.queue.join()

    def stop(self) -> None:
        self.task.cancel()

    async def _run(self) -> None:
        while True:
            what, call = await self.queue.get()
            try:
                await asyncio.wait_for(call(), self.host.call_timeout)
            except TimeoutError:
                logger.warning(
                    "memory provider %s: %s over %g s, skipped",
                    self.host.name,
                    what,
                    self.host.call_timeout,
                )
            except Exception:
                logger.exception("memory provider %s: %s failed", self.host.name, what)
            finally:
                self.queue.task_done()


@dataclass(frozen=True, slots=True)
class _Probe:
    name: str
    available: bool
    reason: str
    active: bool  # a provider is configured and can answer


def _probe(factory: ProviderFactory | None) -> _Probe:
    probe: MemoryProvider = NoProvider()
    if factory is not None:
        try:
            probe = factory()
        except Exception:
            logger.exception("memory provider could not be created: built-in memory only")
    available, reason = _availability(probe)
    active = factory is not None and not isinstance(probe, NoProvider)
    if active and not available:
        logger.warning(
            "memory provider %s is not available (%s): built-in memory only", probe.name, reason
        )
        active = False
    return _Probe(probe.name, available, reason, active)


def _availability(provider: MemoryProvider) -> tuple[bool, str]:
    try:
        if provider.is_available():
            return True, ""
        return False, provider.unavailable_reason() or "not available"
    except Exception as exc:
        return False, f"availability check failed: {type(exc).__name__}"


def _tool_name(schema: Any) -> str:
    try:
        return str(schema["function"]["name"])
    except (TypeError, KeyError):
        return ""


__all__ = ["ProviderFactory", "ProviderHost", "ProviderStatus", "is_trivial"]
