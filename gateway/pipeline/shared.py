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
        intake.first_sighting = self.first_sighting
        lanes.after = self._after

    def first_sighting(self, event: MessageEvent) -> bool:
        """Record the event's own ids before acting on an event that leaves no queue row
        (a button press, /stop, a pairing reply); False: acted on elsewhere already."""
        return self.cluster.seen(event.platform, _ids(event))

    def put(self, item: Admitted, window: float) -> bool:
        """Record and queue `item` in the database (one statement); work it here when
        this instance holds (or just took) its session's lease. False: a duplicate."""
        key = item.key
        sent = item.event.sent_at if item.event.sent_at is not None else 0.0
        queued = self.cluster.enqueue(
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
        if not self.lanes.active(key) and queued.prior != self.me:
            self._forget(key)  # another instance worked it since: read it again
        self.lanes.put(replace(item, row=queued.id), window)
        if queued.waiting:
            self.take(str(key))
        return True

    def take(self, stored_key: str) -> int:
        """Take `stored_key`'s waiting rows into its lane (this instance is woken for it,
        found it nobody's, or its own lane ran dry while rows waited); how many."""
        if not self._serves(stored_key.split(":", 1)[0]):  # (a SessionKey's stored form)
            return 0
        rows = self.cluster.claim(self.me, stored_key, self.lease_s)
        started = False
        for row in rows:
            item = self._item(row)
            if item is None:
                self.cluster.finish(self.me, stored_key, [row.id], release=False)
                continue
            if not started and not self.lanes.active(item.key):
                self._forget(item.key)
            started = True
            self.lanes.put(item)
        if rows:
            self.taken_over += len(rows)
            metrics.EVENTS_TAKEN_OVER.inc(len(rows))
            logger.info("took %d waiting event(s) of session %s", len(rows), stored_key)
        if rows and not started and not self.lanes.running(stored_key):  # none usable
            self.cluster.finish(self.me, stored_key, [], release=True)
        return len(rows)

    def _item(self, row: Queued) -> Admitted | None:
        try:
            event = event_from_record(row.event)
        except (KeyError, TypeError, ValueError):
            logger.error("inbox row %d of %s is unreadable; dropped", row.id, row.session_key)
            return None
        item = self.intake.readmit(event)
        if item is None:  # blocked since it arrived
            return None
        return replace(item, row=row.id, interrupted=row.interrupted)

    def _after(self, key: SessionKey, batch: Batch, idle: bool) -> None:
        rows = [item.row for item in batch if item.row is not None]
        waiting, _freed = self.cluster.finish(self.me, str(key), rows, release=idle)
        if waiting and idle:
            self.take(str(key))

    def outcome(self, item: Admitted) -> str:
        """How far an interrupted item's turn got (see the module's docstring)."""
        return self.db.conversations.turn_outcome(str(item.key), item.event.message_id)

    def hand_back(self, platform: str) -> int:
        """This process lost `platform`'s connection (another instance holds it now):
        its rows go back to the queue for the new holder, then its lanes are given up
        (their ends remove nothing: the rows are no longer this instance's)."""
        rows = self.cluster.hand_back(self.me, platform)
        dropped = self.lanes.drop(platform)
        logger.warning(
            "%s: handed back %d event(s) to the instance that holds it now (%d in lanes)",
            platform,
            rows,
            dropped,
        )
        return rows

    def stop_elsewhere(self, key: SessionKey) -> bool:
        """Ask the instance holding `key` to stop its running turn (NOTIFY); whether
        another instance holds it."""
        holder = self.cluster.stop_turn(str(key))
        return holder is not None and holder != self.me


def _ids(event: MessageEvent) -> list[str]:
    """An event's own ids as recorded: its delivery's and its message's."""
    return [f"e:{event.event_id}", f"m:{event.message_id}"]


__all__ = ["SharedSessions"]
