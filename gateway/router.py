"""The router: from a platform event to a delivered reply.

drop bots (our own messages included) -> dedupe (platform, delivery id / message id)
-> authorize -> group etiquette -> session key -> per-key queue (one turn per session at
a time; messages arriving meanwhile wait their turn, in order, or are merged) -> command
or agent turn -> chunk to the platform's limit -> send (retry transient failures, wait
exactly what a 429 asks, never resend what may have been posted, record what failed).
Adapters only push events into `handle`, which returns at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.access import AccessControl, Caller, Verdict
from gateway.chunking import chunk
from gateway.commands import CommandContext, Commands
from gateway.events import ChatRef, ChatType, MessageEvent, OutboundMessage, SendResult
from gateway.ports import PlatformAdapter
from gateway.session_key import Scope, SessionKey, session_key
from hermes.agent.agent import Agent, Surface
from hermes.agent.conversation import Conversation
from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)

TYPING_AFTER_S = 0.3
CACHE_RECHECK_S = 10.0  # identities and open sessions are re-read from state.db this often
CRASH_REPLY = "Something went wrong on my side; the operator can see why in the log."
APPROVED_REPLY = (
    "Good news: the operator approved your request, so you can talk to me now. "
    "Just write; /help shows what I can do."
)
RESET_REPLY = "Started a fresh conversation. I still remember what's in my memory."
NO_TEXT_REPLY = (
    "I can read text messages (and captions on photos and files), but I can't open "
    "{what} yet. Could you describe it in words?"
)


@dataclass(frozen=True, slots=True)
class RouterPolicy:
    group_scope: Scope = Scope.PER_USER
    scopes: Mapping[str, Scope] = field(default_factory=dict)  # per platform, overrides
    queue_mode: Literal["queue", "merge"] = "queue"
    always_answer_chats: frozenset[str] = frozenset()  # groups answered without a mention
    max_send_attempts: int = 4
    cached_conversations: int = 2_000  # live histories kept in memory (LRU)
    remembered_deliveries: int = 10_000


_arrivals = itertools.count()  # ties in sent_at keep arrival order


@dataclass
class _Lane:
    """The queue and worker of one session key. Waiting messages are kept in the order
    they were sent (the platform's timestamp), not the order they arrived in: an SDK
    handling deliveries concurrently (slack-bolt) may hand them over shuffled."""

    queue: list[tuple[float, int, MessageEvent]] = field(default_factory=list)  # a heap

    def put(self, event: MessageEvent) -> None:
        sent = event.sent_at if event.sent_at is not None else time.time()
        heapq.heappush(self.queue, (sent, next(_arrivals), event))

    def take(self) -> MessageEvent:
        return heapq.heappop(self.queue)[2]

    worker: asyncio.Task[None] | None = None
    current: asyncio.Task[None] | None = None  # the turn running now (/stop cancels it)


class Router:
    def __init__(
        self,
        agent: Agent,
        db: SessionDB,
        adapters: Mapping[str, PlatformAdapter],
        access: AccessControl,
        policy: RouterPolicy = RouterPolicy(),
        *,
        commands: Commands | None = None,
    ) -> None:
        self.agent, self.db, self.adapters = agent, db, adapters
        self.access, self.policy = access, policy
        self.commands = commands or Commands(agent.home, access.config, db, agent)
        self.commands.on_people_change = self.people_changed
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._people_stamp = access.people.stamp()
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._lanes: dict[SessionKey, _Lane] = {}
        # live conversations, with when their session was last seen open in state.db
        self._conversations: OrderedDict[SessionKey, tuple[Conversation, float]] = OrderedDict()
        self._users: dict[tuple[str, str], tuple[str, float]] = {}  # identity -> user id
        self._pinned: dict[SessionKey, Conversation] = {}  # see pin()

    # -- intake ------------------------------------------------------------------------

    def pin(self, key: SessionKey, conv: Conversation) -> None:
        """Continue `conv` for this key until /new, whatever session the key had (the
        CLI opens a fresh session per run, or resumes one from anywhere)."""
        self._pinned[key] = conv

    def people_changed(self) -> None:
        """Identities, roles or access rules changed: re-read them on the next message,
        and tell newly approved requesters they are in."""
        self._users.clear()
        self._conversations.clear()  # a merged user's live sessions now belong to another id
        self.access.forget()
        self._spawn(self._announce_approvals())

    def _sync_people(self) -> None:
        """Notice changes made by another process (the CLI linking or approving someone)."""
        stamp = self.access.people.stamp()
        if stamp != self._people_stamp:
            self._people_stamp = stamp
            self.people_changed()

    async def watch_people(self, every: float = 2.0) -> None:
        """Run as a task: notice other processes' changes even while nobody writes."""
        while True:
            self._sync_people()
            await asyncio.sleep(every)

    async def _announce_approvals(self) -> None:
        for request in self.access.people.unannounced_approvals():
            adapter = self.adapters.get(request.platform)
            if adapter is None or not request.chat_id:
                continue
            if not self.access.people.claim_announcement(request.code):
                continue  # another task told them already
            chat = ChatRef(request.chat_id, ChatType.DM)
            await self.deliver(adapter, chat, APPROVED_REPLY, None, None)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` beside the lanes; stop() waits for it like for a turn."""
        task = asyncio.create_task(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def handle(self, event: MessageEvent) -> None:
        """The adapters' sink: filter and enqueue; never waits for a turn."""
        if event.user.is_bot or self._duplicate(event):
            return
        if not self._addressed(event):
            return
        key = session_key(event, self.policy.scopes.get(event.platform, self.policy.group_scope))
        if Commands.name_of(event.text) == "/stop":  # must not wait behind the turn it stops
            self._spawn(self._stop_turn(key, event))
            return
        lane = self._lanes.setdefault(key, _Lane())
        lane.put(event)
        if lane.worker is None:
            window = self.adapters[event.platform].capabilities.reorder_window_s
            lane.worker = asyncio.create_task(self._drain(key, lane, window))

    def _duplicate(self, event: MessageEvent) -> bool:
        keys = [(event.platform, f"e:{event.event_id}"), (event.platform, f"m:{event.message_id}")]
        if any(k in self._seen for k in keys):
            return True
        for k in keys:
            self._seen[k] = None
        while len(self._seen) > self.policy.remembered_deliveries:
            self._seen.popitem(last=False)
        return False

    def _addressed(self, event: MessageEvent) -> bool:
        if event.chat.type is ChatType.DM or event.addressed:
            return True
        return event.text.startswith("/") or event.chat.id in self.policy.always_answer_chats

    async def _drain(self, key: SessionKey, lane: _Lane, window: float) -> None:
        """One turn at a time for this key, in the order sent; the lane ends when empty."""
        try:
            if window:
                await asyncio.sleep(window)  # let a message sent just before arrive too
            while lane.queue:
                batch = [lane.take()]
                while self.policy.queue_mode == "merge" and lane.queue:
                    batch.append(lane.take())
                lane.current = asyncio.create_task(self._process(key, batch))
                try:
                    await lane.current
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise  # the router is stopping, not a /stop
                except Exception:
                    logger.exception("turn failed for %s", key)
                    await self._apologize(batch[-1])
                finally:
                    lane.current = None
        finally:
            self._lanes.pop(key, None)

    async def _apologize(self, event: MessageEvent) -> None:
        """A turn that crashed still gets an answer (the message itself is saved)."""
        with contextlib.suppress(Exception):
            await self.deliver(
                self.adapters[event.platform],
                event.chat,
                CRASH_REPLY,
                event.message_id,
                None,
                failed=True,
            )

    async def _stop_turn(self, key: SessionKey, event: MessageEvent) -> None:
        adapter = self.adapters[event.platform]
        if self._admit(event) is None:
            return
        lane = self._lanes.get(key)
        running = lane.current if lane is not None else None
        if running is not None and not running.done():
            running.cancel()
            reply = "Stopped. Your message is kept; say what you'd like instead."
        else:
            reply = "Nothing to stop: I'm not working on an answer."
        await self.deliver(adapter, event.chat, reply, event.message_id, None)

    def _admit(self, event: MessageEvent) -> Caller | None:
        """The caller if access allows them; None (after any pairing reply) if not."""
        self._sync_people()
        known = self._known_user(event)
        verdict = self.access.check(event, known)
        if verdict is Verdict.ALLOW:
            return self.access.caller(event, self._user_id(event))
        if verdict is Verdict.PAIR:
            words = event.text.split()
            if len(words) == 2 and Commands.name_of(event.text) == "/link":
                # a stranger proving they are someone known elsewhere: handled, no LLM
                return Caller(self._user_id(event), "user", event.platform, event.user.id, "")
            reply = self.access.pairing_reply(event)
            if reply is not None:
                adapter = self.adapters[event.platform]
                self._spawn(self.deliver(adapter, event.chat, reply, event.message_id, None))
        return None

    # -- one turn ----------------------------------------------------------------------

    async def _process(self, key: SessionKey, batch: list[MessageEvent]) -> None:
        event = batch[-1]
        adapter = self.adapters[event.platform]
        text = "\n\n".join(e.text for e in batch if e.text.strip()).strip()
        if not text:
            kinds: list[str] = sorted({a.kind for e in batch for a in e.attachments}) or ["that"]
            await self.deliver(
                adapter,
                event.chat,
                NO_TEXT_REPLY.format(what=" or ".join(kinds)),
                event.message_id,
                None,
            )
            return
        caller = self._admit(event)
        if caller is None:
            return
        user_id = caller.user_id
        surface = Surface(event.platform, _chat_type(event), event.chat.id, event.chat.thread_id)
        if text.startswith("/"):
            await self._command(adapter, event, text, caller, surface, key)
            return
        conv = self._conversation(key, user_id, surface)
        typing = asyncio.create_task(self._keep_typing(adapter, event.chat))
        try:
            ids = ",".join(e.message_id for e in batch)
            result = await self.agent.turn(conv, text, surface, platform_message_id=ids)
        finally:
            typing.cancel()
        if result.duplicate:
            return
        await self.deliver(
            adapter,
            event.chat,
            result.text,
            event.message_id,
            conv.id if result.ok else None,
            failed=not result.ok,
        )

    def _known_user(self, event: MessageEvent) -> str | None:
        """The user of this identity if there is one, without creating it."""
        cached = self._users.get((event.platform, event.user.id))
        if cached is not None and time.monotonic() - cached[1] < CACHE_RECHECK_S:
            return cached[0]
        return self.access.people.user_by_identity(event.platform, event.user.id)

    def _user_id(self, event: MessageEvent) -> str:
        key = (event.platform, event.user.id)
        cached = self._users.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[1] < CACHE_RECHECK_S:
            return cached[0]
        user_id = self.db.user_for_identity(event.platform, event.user.id, event.user.display_name)
        self._users[key] = (user_id, now)
        return user_id

    def _conversation(self, key: SessionKey, user_id: str, surface: Surface) -> Conversation:
        """The live conversation of a key, kept in memory while its session is open.

        Whether the session was ended elsewhere (the idle job) is re-checked in state.db
        at most every CACHE_RECHECK_S seconds; /new drops the entry itself.
        """
        pinned = self._pinned.get(key)
        if pinned is not None and pinned.user_id == user_id:
            return pinned
        entry = self._conversations.get(key)
        now = time.monotonic()
        if entry is not None and entry[0].user_id == user_id:
            conv, checked = entry
            if now - checked < CACHE_RECHECK_S:
                self._conversations.move_to_end(key)
                return conv
            current = self.db.get_session(conv.id, user_id)
            if current is not None and current.ended_at is None:
                self._conversations[key] = (conv, now)
                self._conversations.move_to_end(key)
                return conv
        conv = self.agent.for_key(user_id, surface, str(key))
        self._conversations[key] = (conv, now)
        while len(self._conversations) > self.policy.cached_conversations:
            self._conversations.popitem(last=False)
        return conv

    async def _command(  # noqa: PLR0917 - everything a command may need about its turn
        self,
        adapter: PlatformAdapter,
        event: MessageEvent,
        text: str,
        caller: Caller,
        surface: Surface,
        key: SessionKey,
    ) -> None:
        if Commands.name_of(text) in ("/new", "/reset"):
            conv = self._conversation(key, caller.user_id, surface)
            self.db.end_session(conv.id, "user_reset")
            self._conversations.pop(key, None)
            self._pinned.pop(key, None)
            reply = RESET_REPLY
        else:
            live = self._pinned.get(key) or (self._conversations.get(key) or (None,))[0]
            session_id = live.id if live is not None else None
            context = CommandContext(caller, surface, session_id)
            try:
                reply = await self.commands.run(context, text)
            except Exception:
                logger.exception("command %r failed", text[:40])
                reply = CRASH_REPLY
        await self.deliver(adapter, event.chat, reply, event.message_id, None)

    async def _keep_typing(self, adapter: PlatformAdapter, chat: ChatRef) -> None:
        with contextlib.suppress(Exception):
            await asyncio.sleep(TYPING_AFTER_S)  # a quick answer needs no indicator
            while True:
                await adapter.typing(chat)
                await asyncio.sleep(4)

    # -- delivery ----------------------------------------------------------------------

    async def deliver(
        self,
        adapter: PlatformAdapter,
        chat: ChatRef,
        text: str,
        reply_to: str | None,
        session_id: str | None,
        *,
        failed: bool = False,
    ) -> bool:
        """Send `text` in chunks; record a failure against the reply stored in the session."""
        caps = adapter.capabilities
        for index, part in enumerate(chunk(text, caps.max_length, caps.length)):
            outbound = OutboundMessage(chat, part, reply_to if index == 0 else None, failed)
            result, attempts = await self._send_one(adapter, outbound)
            if not result.ok:
                logger.warning(
                    "could not deliver to %s %s: %s", adapter.name, chat.id, result.error
                )
                stored = self.db.last_assistant_message_id(session_id) if session_id else None
                self.db.record_delivery(
                    stored,
                    adapter.name,
                    chat.id,
                    ok=False,
                    attempts=attempts,
                    error=result.error,
                )
                return False
        return True

    async def _send_one(
        self, adapter: PlatformAdapter, message: OutboundMessage
    ) -> tuple[SendResult, int]:
        delay = 1.0
        result = SendResult(False, error="not sent")
        for attempt in range(1, self.policy.max_send_attempts + 1):
            result = await adapter.send(message)
            if result.ok or not result.retryable:
                return result, attempt
            if result.retry_after is not None:
                await asyncio.sleep(result.retry_after)  # exactly what the platform asked
            else:
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, 30)
        return result, self.policy.max_send_attempts

    async def stop(self, timeout: float = 20.0) -> None:
        """Let running and queued turns finish within `timeout` (lanes started meanwhile
        included), then cancel what is left."""
        deadline = time.monotonic() + timeout
        while True:
            tasks = [lane.worker for lane in self._lanes.values() if lane.worker]
            tasks += list(self._side_tasks)
            if not tasks:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await asyncio.wait(tasks, timeout=left)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _chat_type(event: MessageEvent) -> str:
    if event.chat.type is ChatType.DM:
        return "dm"
    return "thread" if event.chat.thread_id else event.chat.type.value
