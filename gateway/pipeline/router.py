"""The router: admitted events into one lane per session, each lane one turn at a time.

platform event -> intake (gateway/admission/intake.py: bots, redeliveries, mention gating, the
person admitted, the session key) -> a button press or `/stop` at once, everything else
into the lane of its session key (gateway/pipeline/lanes.py) -> per lane, in the order sent, a
turn (gateway/pipeline/turns.py: the no-text note, a command from the command table, or an agent
turn) -> delivery (gateway/pipeline/delivery.py).

The router itself is the edge of that pipeline: adapters attached (before they start,
so an event that arrives while an adapter is still finishing its start finds it),
`handle` (returns at once), commands and button presses, what `/new` and `/stop` do,
people's changes noticed, and `stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.admission.intake import Admitted, Intake, IntakePolicy
from gateway.admission.people import People
from gateway.admission.session_key import SessionKey
from gateway.commands.context import CommandContext, SessionControl
from gateway.commands.table import Commands, command_name
from gateway.edge.events import ChatRef, MessageEvent
from gateway.edge.ports import PlatformAdapter
from gateway.pipeline.approvals import Approvals
from gateway.pipeline.confirmations import Confirmations
from gateway.pipeline.delivery import Delivery
from gateway.pipeline.lanes import Lanes
from gateway.pipeline.media import MediaIntake
from gateway.pipeline.shared import SharedSessions
from gateway.pipeline.turns import NO_TEXT_REPLY, LiveConversations, Turns, surface_of
from hermes import metrics
from hermes.agent.agent import Agent
from hermes.agent.conversation import Conversation
from hermes.places import ChatType
from hermes.state.db import SessionDB
from hermes.state.engine import storage_problem
from hermes.state.models import PairingRequest
from hermes.state.retry import StateDBError

logger = logging.getLogger(__name__)

CRASH_REPLY = "Something went wrong on my side; the operator can see why in the log."
STORAGE_REPLY = (
    "I could not save this conversation: my storage is full, failing or not answering, so "
    "I may not have kept your message. Please send it again in a little while; the "
    "operator can see why in the log."
)
PRESS_SETTLE_S = 10.0  # the same button pressed again this soon after its command: ignored
APPROVED_REPLY = (
    "Good news: the operator approved your request, so you can talk to me now. "
    "Just write; /help shows what I can do."
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
        self._pressed: dict[tuple[str, str], float] = {}  # ... and when each last finished
        self.intake = Intake(
            people,
            policy.intake,
            open_to_strangers=commands.open_to_strangers,
            reply=self._reply_aside,
        )
        commands.sessions = self
        self.approvals = Approvals(people, self.delivery, self.adapters)
        people.on_change(self._people_changed)
        people.on_pairing(self._ask_admins)
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._settled_aside = 0  # events dropped at intake, and commands and presses run
        # what intake said to the sender of each event being admitted (by the event's id())
        self._intake_replies: dict[int, list[asyncio.Task[Any]]] = {}
        # per chat, the latest event being admitted: the next waits for it (order kept)
        self._admitting: dict[tuple[str, str], asyncio.Future[None]] = {}
        self.conversations = LiveConversations(agent, db, people, policy.cached_conversations)
        self.turns = Turns(
            agent,
            db,
            self.delivery,
            self.adapters,
            self.conversations,
            command=self._command,
            streams=policy.streams,
            media=media,
        )
        self.lanes = Lanes(self.turns.run, self._apologize, policy.queue_mode)
        self.shared: SharedSessions | None = None  # several gateways on one database
        self.confirmations: Confirmations | None = None  # set by the composition root

    def share(self, db: SessionDB, me: str, lease_s: float) -> SharedSessions:
        """Work sessions with the other gateway processes on this (PostgreSQL) database,
        as instance `me` (gateway/pipeline/shared.py)."""
        self.shared = SharedSessions(
            db,
            me,
            lease_s,
            lanes=self.lanes,
            intake=self.intake,
            forget=self.conversations.forget,
            serves=self.adapters.__contains__,
        )
        self.turns.outcome = self.shared.outcome
        return self.shared

    # -- adapters and people ----------------------------------------------------------------

    def attach(self, adapter: PlatformAdapter) -> None:
        """Know `adapter` before it starts: its first events may come during start()."""
        self.adapters[adapter.name] = adapter

    def detach(self, name: str) -> None:
        self.adapters.pop(name, None)

    def pin(self, key: SessionKey, conv: Conversation) -> None:
        """Continue `conv` for this key until /new (see LiveConversations.pin)."""
        self.conversations.pin(key, conv)

    def _people_changed(self) -> None:
        """A merged user's live sessions now belong to another id; newly approved
        requesters are told they are in."""
        self.conversations.forget_all()
        self._spawn(self._announce_approvals())

    async def watch_people(self, every: float = 2.0) -> None:
        """Run as a task: notice other processes' changes even while nobody writes."""
        while True:
            await self.db.run(self.people.sync)
            await asyncio.sleep(every)

    async def _announce_approvals(self) -> None:
        access = self.people.access
        for request in await self.db.run(access.unannounced_approvals):
            adapter = self.adapters.get(request.platform)
            if adapter is None or not request.chat_id:
                continue
            if not await self.db.run(access.claim_announcement, request.code):
                continue  # another task told them already
            chat = ChatRef(request.chat_id, ChatType.DM)
            await self.delivery.deliver(adapter, chat, APPROVED_REPLY, None)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `work` beside the lanes; stop() waits for it like for a turn."""
        task = asyncio.create_task(work)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)
        return task

    def _reply_aside(self, event: MessageEvent, text: str) -> None:
        adapter = self.adapters.get(event.platform)
        if adapter is not None:
            work = self.delivery.deliver(adapter, event.chat, text, event.message_id)
            task = self._spawn(work)
            if (waiting := self._intake_replies.get(id(event))) is not None:
                waiting.append(task)

    def _ask_admins(self, request: PairingRequest) -> None:
        self._spawn(self.approvals.ask(request))

    def _settle(self, _done: object = None) -> None:
        self._settled_aside += 1

    # -- intake -----------------------------------------------------------------------------

    @property
    def settled(self) -> int:
        """Events handled to the end: dropped at intake (a duplicate, a stranger, a
        message nobody addressed to the bot), a command or button press run, or a turn
        finished. An event that must *not* be answered has had its chance once this
        counts it (tests wait for it instead of sleeping)."""
        return self._settled_aside + self.lanes.settled

    async def handle(self, event: MessageEvent) -> None:
        """The adapters' sink: intake, then the lane; never waits for a turn. Who sent
        it is looked up on the database executor (the loop goes on meanwhile); events of
        one chat reach their lanes in the order they came, however long each lookup."""
        metrics.MESSAGES_RECEIVED.labels(event.platform).inc()
        chat = (event.platform, event.chat.id)
        earlier = self._admitting.get(chat)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._admitting[chat] = mine
        try:
            await self._admit(event, earlier)
        finally:
            mine.set_result(None)
            if self._admitting.get(chat) is mine:
                del self._admitting[chat]

    async def _admit(self, event: MessageEvent, earlier: asyncio.Future[None] | None) -> None:
        replies: list[asyncio.Task[Any]] = []
        self._intake_replies[id(event)] = replies  # what intake says to the sender
        try:
            try:
                item = await self.intake.admit(event)
            finally:
                del self._intake_replies[id(event)]
            if earlier is not None:
                await earlier  # the chat's earlier events reach their lanes first
        except Exception as exc:
            if (problem := storage_problem(exc)) is None:
                raise
            # who it is cannot be looked up: a direct message or one addressed to the bot
            # is told (it was not kept), any other message in a group is left alone
            logger.error("could not take an event from %s: %s", event.platform, problem)
            if event.chat.type is ChatType.DM or event.addressed or event.pressed:
                self._spawn(self._apologize(event, problem)).add_done_callback(self._settle)
            else:
                self._settle()
            return
        if item is None:  # dropped; settled once what intake said to the sender is sent
            if replies:
                replies[-1].add_done_callback(self._settle)
            else:
                self._settle()
            return
        try:
            await self._route(item)
        except StateDBError:
            logger.exception("could not take an event of %s", item.key)
            self._spawn(self._apologize(event))

    async def _route(self, item: Admitted) -> None:
        event = item.event
        immediate = event.pressed or self.commands.immediate(event.text)
        shared = self.shared
        if immediate and shared is not None and not await self.db.run(shared.first_sighting, event):
            self._settle()  # another instance acts on it
            return
        if event.pressed:  # a button: at once, beside the lanes (no turn waits for it)
            self._spawn(self._press(item))
            return
        if immediate:  # /stop must not wait behind its turn
            self._spawn(self._command(item))
            return
        adapter = self.adapters.get(event.platform)
        window = adapter.capabilities.reorder_window_s if adapter else 0.0
        if shared is None:
            self.lanes.put(item, window)
        elif not await shared.put(item, window):
            self._settle()  # a duplicate: recorded by another delivery

    async def _apologize(self, event: MessageEvent, storage: str | None = None) -> None:
        """A turn that crashed still gets an answer (the message itself is saved, unless
        the storage was what failed: then it says so)."""
        adapter = self.adapters.get(event.platform)
        if adapter is None:
            return
        reply = STORAGE_REPLY if storage is not None else CRASH_REPLY
        with contextlib.suppress(Exception):
            await self.delivery.deliver(adapter, event.chat, reply, event.message_id, failed=True)

    # -- commands and buttons -------------------------------------------------------------

    async def _command(self, item: Admitted) -> None:
        event = item.event
        adapter = self.adapters[event.platform]
        live = self.conversations.live(item.key)
        context = CommandContext(
            item.person, surface_of(event), live.id if live is not None else None, item
        )
        try:
            reply = await self.commands.run(context, event.text)
        except Exception:
            logger.exception("command %s failed", command_name(event.text))
            reply = CRASH_REPLY
        try:
            await self.delivery.deliver(adapter, event.chat, reply, event.message_id)
        finally:
            self._settle()

    async def _press(self, item: Admitted) -> None:
        """A button press runs its command as the presser (the command table's guards
        apply); a decided access request then shows its outcome on its messages. The
        same button pressed again by the same person while its command runs, or within
        PRESS_SETTLE_S after it finished, is ignored (twenty presses of "consolidate", the
        later ones arriving after the first consolidation ended, are one consolidation)."""
        flight = (item.person.user_id, item.event.text)
        now = time.monotonic()
        self._pressed = {k: t for k, t in self._pressed.items() if now - t < PRESS_SETTLE_S}
        if flight in self._pressing or flight in self._pressed:
            self._settle()  # running, or just done: a burst of presses is one press
            return
        self._pressing.add(flight)
        try:
            await self._run_press(item)
        finally:
            self._pressing.discard(flight)
            self._pressed[flight] = time.monotonic()
            self._settle()

    async def _run_press(self, item: Admitted) -> None:
        event = item.event
        adapter = self.adapters[event.platform]
        context = CommandContext(item.person, surface_of(event), None, item)
        try:
            reply = await self.commands.run(context, event.text)
        except Exception:
            logger.exception("button %s failed", command_name(event.text))
            reply = CRASH_REPLY
        if item.person.is_admin and self.approvals.decides(event):
            await self.approvals.settle(event)  # the request's messages say how it ended
            return
        if not reply:  # said by editing the pressed message (a /confirm answer)
            return
        # anything else (a refusal) goes to the presser alone: their direct chat
        chat = event.chat
        if chat.type is not ChatType.DM or event.user.id != chat.id:
            with contextlib.suppress(Exception):
                chat = await adapter.direct_chat(event.user.id) or chat
        await self.delivery.deliver(adapter, chat, reply, None)

    # -- SessionControl: what /new and /stop do ---------------------------------------------

    async def reset(self, ctx: CommandContext) -> None:
        item = ctx.admitted
        if item is None:
            return
        conv = await self.conversations.aof(item, ctx.surface)
        await self.db.run(self.agent.sessions.end, conv, "user_reset")
        self.conversations.forget(item.key)

    async def stop_turn(self, ctx: CommandContext) -> bool:
        if ctx.admitted is None:
            return False
        if self.lanes.cancel_running(ctx.admitted.key):
            return True
        return self.shared is not None and await self.shared.stop_elsewhere(ctx.admitted.key)

    async def stop(self, timeout: float = 20.0) -> None:
        """Let running and queued turns finish within `timeout` (lanes started meanwhile
        included), then cancel what is left. With several gateways, what waits is
        handed to the others first (`SharedSessions.leave`): only running turns end
        here."""
        deadline = time.monotonic() + timeout
        if self.shared is not None:
            try:
                await self.shared.leave()
            except Exception as exc:  # the database gone: `retire` (or the leases' end) will
                logger.warning("could not hand the waiting events on: %s", exc)
        while True:
            tasks: list[asyncio.Task[Any]] = [*self.lanes.workers(), *self._side_tasks]
            if not tasks:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await asyncio.wait(tasks, timeout=left)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["APPROVED_REPLY", "CRASH_REPLY", "NO_TEXT_REPLY", "Router", "RouterPolicy"]
