"""The host side of the provider seam: every provider call bounded, ordered and isolated.

- One instance per person (`factory()` once per user id, initialized with our user id):
  two people never share a provider identity.
- `memory.recall_mode` is enforced here, not by each provider: `context` injects
  prefetch results and offers no provider tools, `tools` the reverse, `hybrid` both.
- Prefetch gets `memory.prefetch_timeout_ms`; past it the turn goes on without it (a
  log line, a counter). Trivial prompts (greetings, "ok", slash commands) skip it.
- Every write for the provider (sync_turn, memory writes, session switches and ends)
  is first kept in state.db's outbox (hermes/state/outbox.py), then delivered by one
  background worker per person, in the order written, each call bounded by
  `call_timeout`. A call that fails stays first in line and is tried again; after
  BREAKER_AFTER failures in a row the service is left alone (its breaker is open: no
  prefetch, no delivery) for 5 s, doubling up to 5 min, then probed with the next
  write. Writes left at shutdown, or by a gateway that died, are delivered after the
  next start (`resume`); with several gateways each person's writes go through one of
  them at a time. queue_prefetch (a cache warm-up, not a write) runs on the worker
  after the person's writes. `shutdown` drains within a bound and leaves the rest
  waiting in the database.
- A provider that raises or hangs is logged and skipped: a turn never fails because of
  it. Only the primary agent context writes (review, compression and scheduler
  contexts never sync).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import email.utils
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

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
    scrub,
    secret_values,
)

if TYPE_CHECKING:
    from hermes.state.outbox import OutboxDB, OutboxItem

logger = logging.getLogger(__name__)
T = TypeVar("T")


PREFETCH_TIMEOUT_S = 0.8
CALL_TIMEOUT_S = 30.0
MAX_RECALL_CHARS = 4_000
MAX_TOOL_RESULT_CHARS = 16_000
RETRY_S = 1.0  # after a failed delivery, before the same write is tried again
RETRY_AFTER_MAX_S = 3600.0  # the longest wait a Retry-After is followed for
BREAKER_AFTER = 3  # failures in a row that open the breaker
BREAKER_S = (5.0, 300.0)  # how long it stays open: doubling from the first to the second
SETTLE_S = 2.0  # a link waits call_timeout + this for a write of the person in flight
REPLAY_S = 5.0  # how often the outbox is looked at for writes nobody is delivering
MAX_HISTORY_CHARS = 200_000  # the messages a write carries, newest kept (outbox bound)

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
    reachable: bool = True  # False: the breaker is open (the service keeps failing)
    last_error: str = ""  # the latest failure (this process's, else the outbox's)
    waiting: int = 0  # writes in the outbox not yet delivered (the person's, or everyone's)
    dropped: int = 0  # writes the outbox gave up on (full or too old)
    drop_reason: str = ""
    last_dropped: datetime | None = None


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
        outbox: OutboxDB | None = None,
        deliverer: str | None = None,
        retry_after: float = RETRY_S,
        breaker: Breaker | None = None,
    ) -> None:
        self.factory = factory
        self.home = home or Path.home() / ".hermes"
        self.recall_mode = RecallMode(recall_mode)
        self.prefetch_timeout, self.call_timeout = prefetch_timeout, call_timeout
        self.core_tools = frozenset(core_tools)
        self._probed: _Probe | None = None  # the provider is made when first needed
        self._probing = threading.Lock()
        self._instances: dict[str, MemoryProvider] = {}
        self._making: dict[str, threading.Lock] = {}  # a person's instance being made
        self._closing = False  # shutdown began: warm makes no more instances
        self._retired: list[MemoryProvider] = []  # instances of people linked away
        self._workers: dict[str, _Worker] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sync_calls = concurrent.futures.ThreadPoolExecutor(
            max_workers=4, thread_name_prefix="memory-provider"
        )
        self._db_inflight = 0  # outbox calls whose thread is running
        self._refused_tools: set[str] = set()
        self.last_recall: dict[str, int] = {}
        self.skipped = 0
        self.outbox = outbox  # where writes wait (None: nothing is written to providers)
        self.deliverer = deliverer or f"host-{secrets.token_hex(6)}"
        self.retry_after = retry_after
        self.breaker = breaker or Breaker()
        self._replayer: asyncio.Task[None] | None = None

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

    async def aactive(self) -> bool:
        """`active` from async code: the first ask (the provider made and asked once,
        seconds for an SDK) happens on a thread, and so does waiting for another
        thread's ask."""
        probed = self._probed
        return probed.active if probed is not None else await asyncio.to_thread(lambda: self.active)

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
        if session.agent_context is AgentContext.PRIMARY:
            self._write(
                session.user_id,
                "session_switch",
                {
                    "session_id": session.session_id,
                    "parent_session_id": parent_session_id,
                    "reason": reason,
                },
            )
        return (block or "").strip()

    def session_ended(self, session: ProviderSession, messages: list[dict[str, Any]]) -> None:
        if self._writer(session) is not None:
            self._write(session.user_id, "session_end", {"messages": _recent(messages)})

    async def pre_compress(self, session: ProviderSession, messages: list[dict[str, Any]]) -> str:
        """Text the provider adds to the compression summary prompt ('' on failure)."""
        provider = await self._ainstance(session.user_id) if await self.aactive() else None
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
        if self.recall_mode is RecallMode.TOOLS or is_trivial(query) or not await self.aactive():
            return ""
        if not self.breaker.allows():
            self._skip("unreachable")  # the service keeps failing: not asked meanwhile
            return ""
        provider = await self._ainstance(session.user_id)
        if provider is None:
            return ""
        self._loop = asyncio.get_running_loop()
        self._start_replayer()
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
        sid = session.session_id
        payload = {
            "user": user_text,
            "assistant": assistant_text,
            "session_id": sid,
            "messages": _recent(messages),
        }
        self._write(session.user_id, "sync_turn", payload)
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
        error is raised: the link reports it. A provider kept on a service (`remote`) is
        told through the outbox instead, after `keep`'s waiting writes (and `gone`'s,
        which the link moves to `keep`): the link never waits for a service that is
        down, and the move is replayed when it answers."""
        providers: dict[str, MemoryProvider] = {}
        if self.active and self.factory is not None:
            configured = self.factory()
            if getattr(configured, "remote", False) and self.outbox is not None:
                self._write(keep, "merge_people", {"keep": keep, "gone": gone})
            else:
                self._settle(gone)
                providers[self.name] = configured
        for name in registry.BUILT_IN:
            if name not in providers and name != self.name:
                providers[name] = registry.load(name, {}, self.home)()
        for name, provider in providers.items():
            try:
                provider.merge_people(keep, gone, self.home)
            except Exception as exc:
                raise ProviderMergeError(f"memory provider {name}: {exc}") from exc
        with self._lock:
            retired = self._instances.pop(gone, None)  # it acted for a person who is gone
            if retired is not None:
                self._retired.append(retired)  # shut down with the others

    def _settle(self, gone: str) -> None:
        """Wait (at most call_timeout and a little) while a write of `gone` is at the
        provider (this gateway's or another's): moved before it lands, it would land in
        the namespace just moved. Called off the event loop (the link runs in a thread):
        the delivery in flight finishes on the loop. A write still out after that (its
        deliverer died) went nowhere or was applied; either way it goes again, to `keep`."""
        if self.outbox is None:
            return
        deadline = time.monotonic() + self.call_timeout + SETTLE_S
        while self.outbox.in_flight(self.name, gone) and time.monotonic() < deadline:
            time.sleep(0.05)

    def memory_written(self, write: MemoryWrite) -> None:
        """A built-in store changed (add, replace, remove, undo, merge, consolidation);
        called from any thread (memory writes run off the event loop)."""
        if not self.active:
            return
        metadata = {
            "before": write.before,
            "actor": write.actor,
            "session_id": write.session_id,
            "user_id": write.user_id,
        }
        payload = {
            "action": write.action,
            "target": write.target,
            "content": write.content,
            "metadata": metadata,
        }
        self._write(write.user_id, "memory_write", payload)

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

    async def atool_schemas(self, user_id: str) -> list[dict[str, Any]]:
        """`tool_schemas` from async code: making the person's instance and asking it
        (bounded, possibly seconds) happen on a thread, never on the event loop."""
        if self.recall_mode is RecallMode.CONTEXT or not await self.aactive():
            return []
        return await asyncio.to_thread(self.tool_schemas, user_id)

    async def call_tool(self, user_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        provider = await self._ainstance(user_id) if await self.aactive() else None
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

    def status(self, user_id: str, *, everyone: bool = False) -> ProviderStatus:
        """The provider's state, and what waits in the outbox for `user_id` (a person's
        own writes only; `everyone` for an operator's view)."""
        waiting = None
        if self.outbox is not None and self.factory is not None:
            try:
                waiting = self.outbox.status(self.name, None if everyone else user_id)
            except Exception:  # a damaged database: the status says what it can
                logger.exception("memory provider %s: outbox status failed", self.name)
        error = self.breaker.last_error or (waiting.last_error if waiting else "")
        return ProviderStatus(
            self.name,
            self.active,
            self.available,
            self.reason,
            self.recall_mode,
            self.last_recall.get(user_id),
            self.skipped,
            reachable=self.breaker.closed,
            last_error=error,
            waiting=waiting.waiting if waiting else 0,
            dropped=waiting.dropped if waiting else 0,
            drop_reason=waiting.drop_reason if waiting else "",
            last_dropped=waiting.last_dropped if waiting else None,
        )

    async def resume(self) -> None:
        """Start delivering what waits in the outbox (written before a restart, or left
        by a gateway that stopped), and keep looking every REPLAY_S."""
        if self.active and self.outbox is not None:
            self._loop = asyncio.get_running_loop()
            self._start_replayer()

    def warm(self, user_ids: Iterable[str]) -> int:
        """Before their first turn, each person's instance made and its client built,
        its SDK imported and the service asked once (`warm`): that took seconds inside
        a first turn, which then went without recall. Blocking: the gateway calls it in a
        thread at start. The first failure stops it (the service is not answering: each
        turn tries for itself, bounded). Returns how many people were made ready."""
        if not self.active:
            return 0
        ready = 0
        for user_id in user_ids:
            if self._closing:
                break
            provider = self._instance(user_id)
            hook = getattr(provider, "warm", None)
            if provider is None or not callable(hook):
                continue
            try:
                hook()
            except Exception as exc:
                said = scrub(_describe(exc, self.call_timeout), secret_values(provider))
                logger.warning("memory provider %s: not ready at start (%s)", self.name, said)
                break
            ready += 1
        return ready

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait (at most `timeout`) until every person's worker rests: their writes
        delivered, or waiting for the service to answer again."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if all(w.resting() for w in list(self._workers.values())):
                return
            await asyncio.sleep(0.02)

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Drain the workers, then shut every instance down, all within `timeout`;
        writes not delivered stay in the outbox for the next start."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._closing = True
        await self.drain(timeout)
        if self._replayer is not None:
            self._replayer.cancel()
        for worker in list(self._workers.values()):
            worker.stop()
        # an outbox call in flight ends before the database may be closed
        while self._db_inflight and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for provider in [*self._instances.values(), *self._retired]:
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
        for nobody. Made under the person's own lock: a slow client for one person
        keeps nobody else waiting."""
        with self._lock:
            provider = self._instances.get(user_id)
            if provider is not None or self.factory is None:
                return provider
            making = self._making.setdefault(user_id, threading.Lock())
        with making:
            with self._lock:
                provider = self._instances.get(user_id)
            if provider is not None:  # made while this call waited
                return provider
            try:
                made = self.factory()
            except Exception:
                logger.exception("memory provider %s: could not be created", self.name)
                return None

            def start() -> None:
                made.initialize(
                    "",
                    hermes_home=self.home,
                    platform="",
                    user_id=user_id,
                    agent_context=AgentContext.PRIMARY.value,
                )

            self._bounded_sync("initialize", start, None)
            with self._lock:
                self._instances[user_id] = made
                self._making.pop(user_id, None)
        return made

    async def _ainstance(self, user_id: str) -> MemoryProvider | None:
        """`_instance` from async code: one not made yet is made on a thread."""
        with self._lock:
            provider = self._instances.get(user_id)
        return provider or await asyncio.to_thread(self._instance, user_id)

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

    def _write(self, user_id: str, kind: str, payload: dict[str, Any]) -> None:
        """Keep a write for the provider in the outbox, then have the person's worker
        deliver it (from any thread; without a running loop, delivered now)."""
        if self.outbox is None:
            return
        try:
            self.outbox.add(self.name, user_id, kind, payload)
        except Exception:  # a damaged or full database: the write is lost, and says so
            logger.exception("memory provider %s: %s could not be kept", self.name, kind)
            return
        self._poke(user_id)

    def _poke(self, user_id: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another thread (a memory write): hand it to the loop
            other = self._loop
            if other is None or not other.is_running():  # no loop at all (a CLI command)
                self._deliver_now(user_id)
                return
            other.call_soon_threadsafe(self._poke, user_id)
            return
        self._loop = loop
        self._start_replayer()
        self._worker(user_id).poke()

    def _enqueue(self, user_id: str, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        """Run `call` (not a write: nothing keeps it) on the person's worker, after their
        writes (from another thread: handed to the loop); dropped when there is no
        running loop at all."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            other = self._loop
            if other is not None and other.is_running():
                other.call_soon_threadsafe(self._enqueue, user_id, what, call)
            return
        self._loop = loop
        self._worker(user_id).later(what, call)

    def _worker(self, user_id: str) -> _Worker:
        loop = asyncio.get_running_loop()
        worker = self._workers.get(user_id)
        if worker is None or worker.loop is not loop:  # first call, or a new event loop
            worker = self._workers[user_id] = _Worker(self, user_id)
        return worker

    def _start_replayer(self) -> None:
        loop = asyncio.get_running_loop()
        if self.outbox is None or not self.active:
            return
        if self._replayer is None or self._replayer.done() or self._replayer.get_loop() is not loop:
            self._replayer = loop.create_task(self._replay(), context=contextvars.Context())

    async def _replay(self) -> None:
        """Every REPLAY_S: wake the worker of each person with writes waiting (after a
        restart, a lease that ran out, the breaker closing)."""
        outbox = self.outbox
        assert outbox is not None
        while True:
            try:
                for user_id in await self._db(outbox.waiting, self.name):
                    self._worker(user_id).poke()
            except Exception:
                logger.exception("memory provider %s: reading the outbox failed", self.name)
            await asyncio.sleep(REPLAY_S)

    async def _db(self, call: Callable[..., T], *args: Any) -> T:
        """An outbox call off the event loop, counted while its thread runs (a cancelled
        await does not stop the thread): shutdown waits for the ones in flight, so no
        connection is left checked out behind it."""

        def counted() -> T:
            with self._lock:
                self._db_inflight += 1
            try:
                return call(*args)
            finally:
                with self._lock:
                    self._db_inflight -= 1

        return await asyncio.to_thread(counted)

    def _deliver_now(self, user_id: str) -> None:
        """No event loop (a CLI command): one bounded delivery pass for the person; what
        fails waits in the outbox for the gateway."""

        async def bounded() -> None:
            await asyncio.wait_for(self._deliver(user_id), self.call_timeout * 2)

        try:
            asyncio.run(bounded())
        except Exception:
            logger.warning("memory provider %s: delivery left for later", self.name)

    async def _deliver(self, user_id: str) -> float | None:
        """Deliver the person's waiting writes in order until none is left, one fails,
        or the breaker is open; returns how long to wait before trying again (None:
        nothing left to try)."""
        outbox = self.outbox
        provider = self._instance(user_id) if self.active else None
        if outbox is None or provider is None:
            return None
        lease = timedelta(seconds=self.call_timeout + 30)
        while True:
            if not self.breaker.allows():
                return self.breaker.wait()
            item = await self._db(outbox.claim, self.name, user_id, self.deliverer, lease)
            if item is None:
                return None
            try:
                await asyncio.wait_for(_call(provider, item, self.home), self.call_timeout)
            except Exception as exc:
                error = scrub(_describe(exc, self.call_timeout), secret_values(provider))
                kept = await self._db(outbox.failed, item.id, error)
                self.breaker.failure(self.name, error)
                logger.warning(
                    "memory provider %s: %s for %s failed (%s); %s",
                    self.name,
                    item.kind,
                    user_id,
                    error,
                    "kept, tried again" if kept else "given up after too many tries",
                )
                return max(self.retry_after, self.breaker.wait(), asked_wait(exc))
            await self._db(outbox.done, item.id)
            self.breaker.success(self.name)


async def _call(provider: MemoryProvider, item: OutboxItem, home: Path) -> None:
    """One waiting write, as the provider's call it stands for."""
    p = item.payload
    if item.kind == "sync_turn":
        await provider.sync_turn(
            p["user"], p["assistant"], session_id=p["session_id"], messages=p["messages"]
        )
    elif item.kind == "memory_write":
        await asyncio.to_thread(
            provider.on_memory_write, p["action"], p["target"], p["content"], metadata=p["metadata"]
        )
    elif item.kind == "session_switch":
        await provider.on_session_switch(
            p["session_id"], parent_session_id=p["parent_session_id"], reason=p["reason"]
        )
    elif item.kind == "session_end":
        await provider.on_session_end(p["messages"])
    elif item.kind == "merge_people":
        await asyncio.to_thread(provider.merge_people, p["keep"], p["gone"], home)


def asked_wait(exc: BaseException) -> float:
    """The seconds a service asked to be left alone with its refusal (Retry-After: a
    number, or an HTTP date), from a REST provider's ServiceError or an SDK's error that
    carries the response or its headers; 0 when it asked nothing. At most an hour."""
    raw = getattr(exc, "retry_after", None)
    if raw is None:
        headers: Any = getattr(getattr(exc, "response", None), "headers", None)
        if headers is None:
            headers = getattr(exc, "headers", None)
        raw = headers.get("retry-after") if isinstance(headers, Mapping) else None
    if raw is None:
        return 0.0
    text = str(raw).strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return 0.0
        seconds = (when - datetime.now(when.tzinfo)).total_seconds()
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)


def _describe(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    return f"{type(exc).__name__}: {exc}"[:300]


def _recent(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest messages that fit in MAX_HISTORY_CHARS of JSON (one too large alone is
    cut), oldest first: what a write carries into the outbox."""
    kept: list[dict[str, Any]] = []
    used = 0
    for message in reversed(messages):
        size = len(json.dumps(message, ensure_ascii=False, default=str))
        if used + size > MAX_HISTORY_CHARS:
            if not kept:
                content = str(message.get("content", ""))[: MAX_HISTORY_CHARS // 2]
                kept.append({**message, "content": content})
            break
        kept.append(json.loads(json.dumps(message, ensure_ascii=False, default=str)))
        used += size
    return kept[::-1]


class Breaker:
    """A service that keeps failing (`after` failures in a row) is left alone for a
    while (`delays`: the first, doubling up to the second), then probed."""

    def __init__(self, after: int = BREAKER_AFTER, delays: tuple[float, float] = BREAKER_S) -> None:
        self.after, self.delays = after, delays
        self.failures = 0
        self.open_until = 0.0
        self.delay = delays[0]
        self.last_error = ""

    def allows(self) -> bool:
        return time.monotonic() >= self.open_until

    def wait(self) -> float:
        return max(0.0, self.open_until - time.monotonic())

    def failure(self, name: str, error: str) -> None:
        self.last_error = error
        if not self.allows():  # a call begun before it opened: it is open already
            return
        self.failures += 1
        if self.failures >= self.after:
            if self.failures == self.after:
                logger.warning(
                    "memory provider %s keeps failing (%s): not called for %g s, its writes "
                    "wait in the outbox",
                    name,
                    error,
                    self.delay,
                )
            self.open_until = time.monotonic() + self.delay
            self.delay = min(self.delay * 2, self.delays[1])

    @property
    def closed(self) -> bool:
        return self.failures < self.after

    def success(self, name: str) -> None:
        if not self.closed:
            logger.info("memory provider %s answers again: delivering its waiting writes", name)
        self.failures, self.open_until, self.delay, self.last_error = 0, 0.0, self.delays[0], ""


class _Worker:
    """One person's deliveries, one at a time: their waiting writes in order, then the
    calls that are not writes."""

    def __init__(self, host: ProviderHost, user_id: str) -> None:
        self.host, self.user_id = host, user_id
        self.loop = asyncio.get_running_loop()
        self.wake = asyncio.Event()
        self.extra: asyncio.Queue[tuple[str, Callable[[], Awaitable[Any]]]] = asyncio.Queue()
        self.busy = False
        self.retry: asyncio.TimerHandle | None = None
        # a context of its own: the worker outlives the turn that made it, and its log
        # lines must not carry that turn's id (they did, for every later delivery)
        self.task = self.loop.create_task(self._run(), context=contextvars.Context())

    def poke(self) -> None:
        self.wake.set()

    def later(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        self.extra.put_nowait((what, call))
        self.wake.set()

    def resting(self) -> bool:
        return not self.busy and not self.wake.is_set() and self.extra.empty()

    def stop(self) -> None:
        if self.retry is not None:
            self.retry.cancel()
        self.task.cancel()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            self.busy = True
            try:
                wait = await self.host._deliver(self.user_id)
                if wait is not None:
                    if self.retry is not None:
                        self.retry.cancel()
                    self.retry = self.loop.call_later(wait, self.wake.set)
                while not self.extra.empty():
                    await self._other(*self.extra.get_nowait())
            except Exception:  # a damaged database: tried again at the next poke
                logger.exception("memory provider %s: delivery failed", self.host.name)
            finally:
                self.busy = False

    async def _other(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
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


__all__ = ["Breaker", "ProviderFactory", "ProviderHost", "ProviderStatus", "is_trivial"]
