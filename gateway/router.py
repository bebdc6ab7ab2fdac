"""The router: admitted events into one lane per session, each lane one turn at a time.

platform event -> intake (gateway/intake.py: bots, redeliveries, mention gating, the
person admitted, the session key) -> `/stop` at once, everything else into the lane of
its session key -> per lane, in the order sent: the no-text note, a command (the
command table), or an agent turn -> delivery (gateway/delivery.py).

Adapters are attached before they start, so an event that arrives while an adapter is
still finishing its start (Discord syncing its commands) finds it. `handle` returns at
once; lanes wait messages that arrive during a turn in order, or merge consecutive
plain messages of one person (`queue_mode: merge`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway import logs
from gateway.approvals import Approvals
from gateway.command_context import CommandContext, SessionControl
from gateway.commands import Commands, command_name
from gateway.delivery import Delivery
from gateway.events import ChatRef, MessageEvent
from gateway.intake import Admitted, Intake, IntakePolicy
from gateway.media import MediaIntake, Prepared
from gateway.people import People
from gateway.ports import PlatformAdapter
from gateway.session_key import SessionKey
from gateway.streaming import StreamedReply
from hermes import metrics
from hermes.agent.agent import Agent, Speaker, Surface
from hermes.agent.conversation import Conversation
from hermes.places import ChatType
from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)

TYPING_AFTER_S = 0.3
SESSION_RECHECK_S = 10.0  # an open session is re-read from state.db this often
CRASH_REPLY = "Something went wrong on my side; the operator can see why in the log."
APPROVED_REPLY = (
    "Good news: the operator approved your request, so you can talk to me now. "
    "Just write; /help shows what I can do."
)
NO_TEXT_REPLY = (
    "I can read text messages (and captions on photos and files), but I can't open "
    "{what} yet. Could you describe it in words?"
)


@dataclass(frozen=True, slots=True)
class RouterPolicy:
    intake: IntakePolicy = field(default_factory=IntakePolicy)
    queue_mode: Literal["queue", "merge"] = "queue"
    cached_conversations: int = 2_000  # live histories kept in memory (LRU)
    streaming: bool = True  # gateway.streaming: replies shown as they are written
    streaming_by_platform: Mapping[str, bool] = field(default_factory=dict)  # overrides

    def streams(self, platform: str) -> bool:
        return self.streaming_by_platform.get(platform, self.streaming)


_arrivals = itertools.count()  # ties in sent_at keep arrival order


@dataclass
class _Lane:
    """The queue and worker of one session key. Waiting messages are kept in the order
    they were sent (the platform's timestamp), not the order they arrived in: an SDK
    handling deliveries concurrently (slack-bolt) may hand them over shuffled."""

    queue: list[tuple[float, int, Admitted]] = field(default_factory=list)  # a heap
    worker: asyncio.Task[None] | None = None
    current: asyncio.Task[None] | None = None  # the turn running now (/stop cancels it)

    def put(self, item: Admitted) -> None:
        sent = item.event.sent_at if item.event.sent_at is not None else time.time()
        heapq.heappush(self.queue, (sent, next(_arrivals), item))

    def take(self) -> Admitted:
        return heapq.heappop(self.queue)[2]

    def peek(self) -> Admitted | None:
        return self.queue[0][2] if self.queue else None


class Router(SessionControl):
    def __init__(
        self,
        agent: Agent,
        db: SessionDB,
        people: People,
        commands: Commands,
        policy: RouterPolicy = RouterPolicy(),
        *,
        media: MediaIntake | None = None,
    ) -> None:
        self.agent, self.db, self.people, self.commands = agent, db, people, commands
        self.policy, self.media = policy, media
        self.adapters: dict[str, PlatformAdapter] = {}
        self.delivery = Delivery(db)
        self._pressing: set[tuple[str, str]] = set()  # (person, command) of presses running
        self.intake = Intake(
            people,
            policy.intake,
            open_to_strangers=commands.open_to_strangers,
            reply=self._reply_aside,
        )
        commands.sessions = self
        self.approvals = Approvals(people, self.delivery, self.adapters)
        people.on_change(self._people_changed)
        people.on_pairing(lambda request: self._spawn(self.approvals.ask(request)))
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._lanes: dict[SessionKey, _Lane] = {}
        # live conversations, with when their session was last seen open in state.db
        self._conversations: OrderedDict[SessionKey, tuple[Conversation, float]] = OrderedDict()
        self._pinned: dict[SessionKey, Conversation] = {}  # see pin()

    # -- adapters and people ----------------------------------------------------------------

    def attach(self, adapter: PlatformAdapter) -> None:
        """Know `adapter` before it starts: its first events may come during start()."""
        self.adapters[adapter.name] = adapter

    def detach(self, name: str) -> None:
        self.adapters.pop(name, None)

    def pin(self, key: SessionKey, conv: Conversation) -> None:
        """Continue `conv` for this key until /new, whatever session the key had (the
        CLI opens a fresh session per run, or resumes one from anywhere)."""
        self._pinned[key] = conv

    def _people_changed(self) -> None:
        """A merged user's live sessions now belong to another id; newly approved
        requesters are told they are in."""
        self._conversations.clear()
        self._spawn(self._announce_approvals())

    async def watch_people(self, every: float = 2.0) -> None:
        """Run as a task: notice other processes' changes even while nobody writes."""
        while True:
            self.people.sync()
            await asyncio.sleep(every)

    async def _announce_approvals(self) -> None:
        for request in self.people.access.unannounced_approvals():
            adapter = self.adapters.get(request.platform)
            if adapter is None or not request.chat_id:
                continue
            if not self.people.access.claim_announcement(request.code):
                continue  # another task told them already
            chat = ChatRef(request.chat_id, ChatType.DM)
            await self.delivery.deliver(adapter, chat, APPROVED_REPLY, None)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` beside the lanes; stop() waits for it like for a turn."""
        task = asyncio.create_task(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    def _reply_aside(self, event: MessageEvent, text: str) -> None:
        adapter = self.adapters.get(event.platform)
        if adapter is not None:
            self._spawn(self.delivery.deliver(adapter, event.chat, text, event.message_id))

    # -- intake -----------------------------------------------------------------------------

    async def handle(self, event: MessageEvent) -> None:
        """The adapters' sink: intake, then the lane; never waits for a turn."""
        metrics.MESSAGES_RECEIVED.labels(event.platform).inc()
        item = self.intake.admit(event)
        if item is None:
            return
        if event.pressed:  # a button: at once, beside the lanes (no turn waits for it)
            self._spawn(self._press(item))
            return
        if self.commands.immediate(event.text):  # /stop must not wait behind its turn
            self._spawn(self._command(item))
            return
        lane = self._lanes.setdefault(item.key, _Lane())
        lane.put(item)
        self._count_queued(event.platform)
        if lane.worker is None:
            adapter = self.adapters.get(event.platform)
            window = adapter.capabilities.reorder_window_s if adapter else 0.0
            lane.worker = asyncio.create_task(self._drain(item.key, lane, window))

    async def _drain(self, key: SessionKey, lane: _Lane, window: float) -> None:
        """One turn at a time for this key, in the order sent; the lane ends when empty."""
        try:
            if window:
                await asyncio.sleep(window)  # let a message sent just before arrive too
            while lane.queue:
                batch = self._next_batch(lane)
                self._count_queued(batch[0].event.platform)
                with logs.turn():  # the turn's task, and its log lines, carry the id
                    lane.current = asyncio.create_task(self._process(batch))
                    try:
                        await lane.current
                    except asyncio.CancelledError:
                        task = asyncio.current_task()
                        if task is not None and task.cancelling():
                            raise  # the router is stopping, not a /stop
                    except Exception:
                        logger.exception("turn failed for %s", key)
                        await self._apologize(batch[-1].event)
                    finally:
                        lane.current = None
        finally:
            self._lanes.pop(key, None)

    def _count_queued(self, platform: str) -> None:
        waiting = sum(
            1
            for lane in self._lanes.values()
            for _, _, item in lane.queue
            if item.event.platform == platform
        )
        metrics.QUEUE_DEPTH.labels(platform).set(waiting)

    def _next_batch(self, lane: _Lane) -> list[Admitted]:
        """The next message; in merge mode with the plain messages of the same person
        waiting right behind it (commands and no-text messages always go alone)."""
        batch = [lane.take()]
        if self.policy.queue_mode != "merge" or not _mergeable(batch[0]):
            return batch
        while (following := lane.peek()) is not None and _mergeable(following):
            if following.person.user_id != batch[0].person.user_id:
                break
            batch.append(lane.take())
        return batch

    async def _apologize(self, event: MessageEvent) -> None:
        """A turn that crashed still gets an answer (the message itself is saved)."""
        adapter = self.adapters.get(event.platform)
        if adapter is None:
            return
        with contextlib.suppress(Exception):
            await self.delivery.deliver(
                adapter, event.chat, CRASH_REPLY, event.message_id, failed=True
            )

    # -- one turn ---------------------------------------------------------------------------

    async def _process(self, batch: list[Admitted]) -> None:
        first = batch[0]
        event = first.event
        adapter = self.adapters[event.platform]
        prepared, answered = await self._attachments(adapter, event)
        if answered:
            return
        if event.text.startswith("/") and prepared is None:
            await self._command(first)
            return
        started = time.monotonic()
        if prepared is not None:
            text = prepared.text
        else:
            text = "\n\n".join(item.event.text.strip() for item in batch)
        surface = _surface(event)
        conv = self._conversation(first, surface)
        speaker = Speaker(first.person.user_id, first.person.display_name or "someone")
        last = batch[-1].event
        stream = self._stream(adapter, last)
        typing = asyncio.create_task(self._keep_typing(adapter, event.chat))
        try:
            ids = ",".join(item.event.message_id for item in batch)
            result = await self.agent.turn(
                conv,
                text,
                surface,
                platform_message_id=ids,
                speaker=speaker,
                stream=stream,
                images=prepared.images if prepared is not None else (),
            )
        except asyncio.CancelledError:
            if stream is not None:
                await stream.stopped()  # what was shown stays, marked as stopped
            raise
        finally:
            typing.cancel()
        if result.duplicate:
            return
        if prepared is not None and self.media is not None:  # kept, by reference
            self.media.record(prepared, result.session_id, conv.user_id, self.db)
        if stream is not None:
            await stream.finish(result.text, stored_id=result.reply_id, failed=not result.ok)
        else:
            await self.delivery.deliver(
                adapter,
                last.chat,
                result.text,
                last.message_id,
                stored_id=result.reply_id,
                failed=not result.ok,
            )
        logger.info(  # who and where, never what was said
            "turn %s: %s %s chat %s, user %s, session %s, %d message(s), %.2f s",
            "answered" if result.ok else "failed",
            event.platform,
            event.chat.type.value,
            event.chat.id,
            first.person.user_id,
            conv.id,
            len(batch),
            time.monotonic() - started,
        )

    async def _attachments(
        self, adapter: PlatformAdapter, event: MessageEvent
    ) -> tuple[Prepared | None, bool]:
        """The message's files made ready for its turn (downloads, transcription), and
        whether it was answered already (nothing in it could be used, or no text)."""
        if event.attachments and self.media is not None:
            typing = asyncio.create_task(self._keep_typing(adapter, event.chat))
            try:
                prepared = await self.media.prepare(adapter, event)
            finally:
                typing.cancel()
            if prepared.reply is None:
                return prepared, False
            await self.delivery.deliver(adapter, event.chat, prepared.reply, event.message_id)
            return None, True
        if event.text.strip():
            return None, False
        kinds: list[str] = sorted({a.kind for a in event.attachments}) or ["that"]
        note = NO_TEXT_REPLY.format(what=" or ".join(kinds))
        await self.delivery.deliver(adapter, event.chat, note, event.message_id)
        return None, True

    def _stream(self, adapter: PlatformAdapter, event: MessageEvent) -> StreamedReply | None:
        """The live view of this turn's reply, when streaming is on and possible here."""
        group = event.chat.type is not ChatType.DM
        interval = adapter.capabilities.edit_interval(group)
        if interval is None or not self.policy.streams(adapter.name):
            return None
        return StreamedReply(adapter, event.chat, event.message_id, self.delivery, interval)

    def _owner(self, item: Admitted) -> str:
        """The user owning the key's sessions: the person, or the chat when shared."""
        if item.key.shared:
            return self.people.chat_owner(item.event.platform, item.event.chat.id)
        return item.person.user_id

    def _conversation(self, item: Admitted, surface: Surface) -> Conversation:
        """The live conversation of a key, kept in memory while its session is open.

        Whether the session was ended elsewhere (the idle job) is re-checked in state.db
        at most every SESSION_RECHECK_S seconds; /new drops the entry itself.
        """
        key, owner = item.key, self._owner(item)
        pinned = self._pinned.get(key)
        if pinned is not None and pinned.user_id == owner:
            return pinned
        entry = self._conversations.get(key)
        now = time.monotonic()
        if entry is not None and entry[0].user_id == owner:
            conv, checked = entry
            if now - checked < SESSION_RECHECK_S:
                self._conversations.move_to_end(key)
                return conv
            current = self.db.conversations.get_session(conv.id, owner)
            if current is not None and current.ended_at is None:
                self._conversations[key] = (conv, now)
                self._conversations.move_to_end(key)
                return conv
        conv = self.agent.sessions.for_key(owner, surface, str(key), shared=key.shared)
        self._conversations[key] = (conv, now)
        while len(self._conversations) > self.policy.cached_conversations:
            self._conversations.popitem(last=False)
        return conv

    async def _command(self, item: Admitted) -> None:
        event = item.event
        adapter = self.adapters[event.platform]
        live = self._pinned.get(item.key) or (self._conversations.get(item.key) or (None,))[0]
        context = CommandContext(
            item.person, _surface(event), live.id if live is not None else None, item
        )
        try:
            reply = await self.commands.run(context, event.text)
        except Exception:
            logger.exception("command %s failed", command_name(event.text))
            reply = CRASH_REPLY
        await self.delivery.deliver(adapter, event.chat, reply, event.message_id)

    async def _press(self, item: Admitted) -> None:
        """A button press runs its command as the presser (the command table's guards
        apply); a decided access request then shows its outcome on its messages. The
        same button pressed again by the same person while its command runs is ignored
        (single flight: twenty presses of "consolidate" are one consolidation)."""
        flight = (item.person.user_id, item.event.text)
        if flight in self._pressing:
            return
        self._pressing.add(flight)
        try:
            await self._run_press(item)
        finally:
            self._pressing.discard(flight)

    async def _run_press(self, item: Admitted) -> None:
        event = item.event
        adapter = self.adapters[event.platform]
        context = CommandContext(item.person, _surface(event), None, item)
        try:
            reply = await self.commands.run(context, event.text)
        except Exception:
            logger.exception("button %s failed", command_name(event.text))
            reply = CRASH_REPLY
        if item.person.is_admin and self.approvals.decides(event):
            await self.approvals.settle(event)  # the request's messages say how it ended
            return
        # anything else (a refusal) goes to the presser alone: their direct chat
        chat = event.chat
        if chat.type is not ChatType.DM or event.user.id != chat.id:
            with contextlib.suppress(Exception):
                chat = await adapter.direct_chat(event.user.id) or chat
        await self.delivery.deliver(adapter, chat, reply, None)

    # -- SessionControl: what /new and /stop do ---------------------------------------------

    def reset(self, ctx: CommandContext) -> None:
        item = ctx.admitted
        if item is None:
            return
        conv = self._conversation(item, ctx.surface)
        self.agent.sessions.end(conv, "user_reset")
        self._conversations.pop(item.key, None)
        self._pinned.pop(item.key, None)

    def stop_turn(self, ctx: CommandContext) -> bool:
        lane = self._lanes.get(ctx.admitted.key) if ctx.admitted else None
        running = lane.current if lane is not None else None
        if running is None or running.done():
            return False
        running.cancel()
        return True

    async def _keep_typing(self, adapter: PlatformAdapter, chat: ChatRef) -> None:
        with contextlib.suppress(Exception):
            await asyncio.sleep(TYPING_AFTER_S)  # a quick answer needs no indicator
            while True:
                await adapter.typing(chat)
                await asyncio.sleep(4)

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


def _mergeable(item: Admitted) -> bool:
    text = item.event.text.strip()
    return bool(text) and not text.startswith("/") and not item.event.attachments


def _surface(event: MessageEvent) -> Surface:
    return Surface(event.platform, event.chat.type, event.chat.id, event.chat.thread_id)


__all__ = ["CRASH_REPLY", "NO_TEXT_REPLY", "Router", "RouterPolicy"]
