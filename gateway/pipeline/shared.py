"""Sessions shared by several gateway processes on one PostgreSQL database.

With one process, a session's lane lives in that process's memory (gateway/pipeline/
lanes.py). With several, an event may reach any of them, so the database decides
(hermes/state/cluster.py):

- an admitted event's own ids are recorded in the statement that puts it into its
  session's inbox (an event with no row, a button press or /stop, right before it is
  acted on): a delivery that reaches two instances, or a redelivery, is acted on once,
  and one taken by a process that died before that statement is taken again;
- in that same statement the session's lease is taken if it is free: the instance
  that holds it works the session
  in its local lane, one turn at a time in the order sent; any other instance only
  queues the event and wakes the holder (NOTIFY);
- after each turn the holder removes the turn's rows and, when its lane is empty and
  nothing waits, frees the lease; rows that wait (sent to other instances meanwhile)
  are taken into the lane, in sent order (`take`);
- a holder that dies stops renewing its leases: once one expires, an instance that
  finds the waiting rows (woken, or by polling: gateway/cluster.py) takes them over.
  A row the dead holder had taken is *interrupted*: its turn is checked before it is
  answered (`Turns` asks `outcome`): not stored yet -> answered; stored with no reply
  (the model call was in flight) -> the person is asked to send it again; a reply
  stored -> not answered again (it was sent, or its outcome is unknown).

A session that moves between instances is read again from the database when its lane
starts (the cached conversation may lack turns another instance added).

Stopping is a hand-over (`leave`, at a SIGTERM): the instance takes no new work; what
waits in its lanes goes back to the queue at once, and the sessions with nothing
running are let go (their lease freed, every instance woken to take them); a session
whose turn is running keeps its lease until that turn ends, so nobody answers its
newer messages before the older one, then is let go the same way. What is still
running at the end of the grace period is handed back by `retire` (interrupted).

Every database call here is awaited through the database executor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from gateway.admission.intake import Admitted, Intake
from gateway.admission.session_key import SessionKey
from gateway.edge.events import MessageEvent, event_from_record, event_record
from gateway.pipeline.lanes import Batch, Lanes
from hermes import metrics
from hermes.state.cluster import Queued
from hermes.state.conversations import TurnOutcome
from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)


class SharedSessions:
    def __init__(
        self,
        db: SessionDB,
        me: str,
        lease_s: float,
        *,
        lanes: Lanes,
        intake: Intake,
        forget: Callable[[SessionKey], None],
        serves: Callable[[str], bool],
    ) -> None:
        """`me`: this instance's id; `forget` drops a session's cached conversation;
        `serves`: whether a platform is connected here (only its sessions are taken)."""
        self.db, self.cluster, self.me, self.lease_s = db, db.cluster, me, lease_s
        self.lanes, self.intake, self._forget, self._serves = lanes, intake, forget, serves
        self.queued_elsewhere = 0  # events this instance queued for another's session
        self.taken_over = 0  # rows taken from another instance's queue or a dead holder
        self.leaving = False  # stopping: nothing new is taken (see `leave`)
        # sessions whose waiting rows are being claimed now, with the events of theirs
        # queued here meanwhile: all go into the lane together, in the order sent
        self._taking: dict[str, list[Admitted]] = {}
        self._again: set[str] = set()  # asked to take while a claim ran: claim again
        intake.first_sighting = self.first_sighting
        lanes.after = self._after

    def first_sighting(self, event: MessageEvent) -> bool:
        """Record the event's own ids before acting on an event that leaves no queue row
        (a button press, /stop, a pairing reply); False: acted on elsewhere already."""
        return self.cluster.seen(event.platform, _ids(event))

    async def put(self, item: Admitted, window: float) -> bool:
        """Record and queue `item` in the database (one statement); work it here when
        this instance holds (or just took) its session's lease. False: a duplicate."""
        key = item.key
        sent = item.event.sent_at if item.event.sent_at is not None else 0.0
        queued = await self.db.run(
            self.cluster.enqueue,
            self.me,
            str(key),
            platform=item.event.platform,
            ids=_ids(item.event),
            sent_at=sent or item.event.received_at.timestamp(),
            seq=item.event.order,
            event=event_record(item.event),
            ttl=self.lease_s,
        )
        if queued is None:
            return False
        if not queued.held:
            self.queued_elsewhere += 1
            return True
        if self.leaving:  # arrived as this instance stops: on to another
            running = self.lanes.running(str(key))
            await self.db.run(
                self.cluster.let_go, self.me, str(key), returned=[queued.id], release=not running
            )
            return True
        if not self.lanes.active(key) and queued.prior != self.me:
            self._forget(key)  # another instance worked it since: read it again
        mine = replace(item, row=queued.id)
        if (joining := self._taking.get(str(key))) is not None:
            joining.append(mine)  # its session's waiting rows are being read: with them
        elif queued.waiting:  # older events wait for the session: into the lane with it
            await self.take(str(key), also=mine, window=window)
        else:
            self.lanes.put(mine, window)
        return True

    async def take(
        self, stored_key: str, *, also: Admitted | None = None, window: float = 0.0
    ) -> int:
        """Take `stored_key`'s waiting rows into its lane (this instance is woken for it,
        found it nobody's, or its own lane ran dry while rows waited), with `also` (an
        event of that session just queued here); how many. Every item is read first and
        then put in the lane at once, which orders them by when they were sent: a lane
        started by the first would already be answering it. Nothing once leaving."""
        if self.leaving or not self._serves(stored_key.split(":", 1)[0]):  # (stored form)
            if also is not None:
                self.lanes.put(also, window)
            return 0
        if (joining := self._taking.get(stored_key)) is not None:  # a claim runs already
            if also is not None:
                joining.append(also)
            self._again.add(stored_key)  # it claims once more before it ends
            return 0
        items = self._taking[stored_key] = [also] if also is not None else []
        try:
            rows = await self._claim(stored_key, items)
        finally:
            del self._taking[stored_key]
            self._again.discard(stored_key)
        if self.leaving:  # began to stop meanwhile: they go on to another instance
            rows_back = [item.row for item in items if item.row is not None]
            running = self.lanes.running(stored_key)
            await self.db.run(
                self.cluster.let_go, self.me, stored_key, returned=rows_back, release=not running
            )
            return 0
        started = bool(items)
        if items and not self.lanes.active(items[0].key):
            self._forget(items[0].key)
        for item in items:
            self.lanes.put(item, window)
        if rows:
            self.taken_over += len(rows)
            metrics.EVENTS_TAKEN_OVER.inc(len(rows))
            logger.info("took %d waiting event(s) of session %s", len(rows), stored_key)
        if rows and not started and not self.lanes.running(stored_key):  # none usable
            await self.db.run(self.cluster.finish, self.me, stored_key, [], release=True)
        return len(rows)

    async def _claim(self, stored_key: str, items: list[Admitted]) -> list[Queued]:
        """Claim the session's waiting rows (again while asked meanwhile), each read
        into `items` (an unusable one is dropped); the rows claimed."""
        rows: list[Queued] = []
        while True:
            claimed = await self.db.run(self.cluster.claim, self.me, stored_key, self.lease_s)
            rows += claimed
            for row in claimed:
                item = await self._item(row)
                if item is None:
                    await self.db.run(
                        self.cluster.finish, self.me, stored_key, [row.id], release=False
                    )
                    continue
                items.append(item)
            if stored_key not in self._again:
                return rows
            self._again.discard(stored_key)

    async def _item(self, row: Queued) -> Admitted | None:
        try:
            event = event_from_record(row.event)
        except (KeyError, TypeError, ValueError):
            logger.error("inbox row %d of %s is unreadable; dropped", row.id, row.session_key)
            return None
        item = await self.intake.readmit(event)
        if item is None:  # blocked since it arrived
            return None
        return replace(item, row=row.id, interrupted=row.interrupted)

    async def _after(self, key: SessionKey, batch: Batch, idle: bool) -> None:
        rows = [item.row for item in batch if item.row is not None]
        if self.leaving:  # the session goes to whoever takes it next, with what waits
            left = [item.row for item in self.lanes.clear(key) if item.row is not None]
            await self.db.run(self.cluster.let_go, self.me, str(key), finished=rows, returned=left)
            return
        waiting, _freed = await self.db.run(
            self.cluster.finish, self.me, str(key), rows, release=idle
        )
        if waiting and idle:
            await self.take(str(key))

    async def leave(self) -> int:
        """Stopping: take nothing new; what waits in the lanes goes back to the queue,
        and each session with no turn running is let go now (the others when their turn
        ends, in `_after`); how many waiting events were handed on."""
        self.leaving = True
        handed = 0
        for key, items, running in self.lanes.leave():
            rows = [item.row for item in items if item.row is not None]
            handed += len(rows)
            await self.db.run(
                self.cluster.let_go, self.me, str(key), returned=rows, release=not running
            )
        if handed:
            logger.info("stopping: handed %d waiting event(s) to the other instances", handed)
        return handed

    def outcome(self, item: Admitted) -> TurnOutcome:
        """How far an interrupted item's turn got (see the module's docstring)."""
        return self.db.conversations.turn_outcome(str(item.key), item.event.message_id)

    async def hand_back(self, platform: str) -> int:
        """This process lost `platform`'s connection (another instance holds it now):
        its rows go back to the queue for the new holder, then its lanes are given up
        (their ends remove nothing: the rows are no longer this instance's)."""
        rows = await self.db.run(self.cluster.hand_back, self.me, platform)
        dropped = self.lanes.drop(platform)
        logger.warning(
            "%s: handed back %d event(s) to the instance that holds it now (%d in lanes)",
            platform,
            rows,
            dropped,
        )
        return rows

    async def stop_elsewhere(self, key: SessionKey) -> bool:
        """Ask the instance holding `key` to stop its running turn (NOTIFY); whether
        another instance holds it."""
        holder = await self.db.run(self.cluster.stop_turn, str(key))
        return holder is not None and holder != self.me


def _ids(event: MessageEvent) -> list[str]:
    """An event's own ids as recorded: its delivery's and its message's."""
    return [f"e:{event.event_id}", f"m:{event.message_id}"]


__all__ = ["SharedSessions"]
