"""Reminders delivered: the runner that sends each due run once, where it was asked for.

The `schedule` tool stores a reminder in state.db (hermes/state/reminders.py). A process
that has the reminder's platform attached runs it when due: the gateway, for Telegram,
Slack and Discord (woken by an APScheduler job at the exact time, kept in the same job
store as the maintenance jobs, and by a sweep job every 30 s that catches reminders
made by another process); `hermes chat`, for reminders made in the terminal, while it
is open. Each run is claimed in state.db before anything is sent (two gateways, or a
retry after a crash, never send it twice) and then:

- sent to the chat, platform and thread it was created in, as the person's (a prompt
  reminder first runs a short agent turn, in a session of its own, and sends its answer);
- a run delivered more than `LATE_AFTER` after its time (the gateway was down, the
  instance that was to wake up for it died and another's sweep found it, a retry) is
  marked late, in the text and on the run; a recurring one then moves to its next time
  after now: one catch-up delivery, never a burst of the missed ones;
- a failure the platform answered (5xx, 429 after the retries) is retried later
  (`RETRY_DELAYS`), recorded on the run; an unknown outcome (it may have been posted) is
  never resent; a refusal (the chat is gone, the bot was blocked or removed) pauses the
  reminder with that reason, as does a person blocked by an admin.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from gateway import logs
from gateway.edge.events import ChatRef
from hermes.fence import fence
from hermes.places import Surface
from hermes.reminders import LATE_AFTER, TimeError, local, next_run, zone
from hermes.state.models import Reminder, as_utc
from hermes.state.reminders import Claim

if TYPE_CHECKING:
    from gateway.pipeline.router import Router
    from hermes.agent.agent import Agent
    from hermes.state.db import SessionDB

logger = logging.getLogger(__name__)

RETRY_DELAYS = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15))

# the runners of this process, by home: the scheduler's stored jobs find them here
_RUNNERS: dict[str, ReminderRunner] = {}


class ReminderRunner:
    def __init__(
        self,
        db: SessionDB,
        router: Router,
        agent: Agent,
        *,
        home: str = "",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.db, self.router, self.agent, self.home = db, router, agent, home
        self.clock = clock
        self.name = f"{logs.process_name()}:{id(self):x}"
        self.on_scheduled: Callable[[Reminder], None] | None = None  # exact wake-ups

    def register(self) -> None:
        _RUNNERS[self.home] = self

    def unregister(self) -> None:
        if _RUNNERS.get(self.home) is self:
            del _RUNNERS[self.home]

    # -- waking up ---------------------------------------------------------------------

    async def sweep(self) -> int:
        """Run every reminder due now on a platform of this process; how many were sent."""
        platforms = tuple(self.router.adapters)
        if not platforms:
            return 0
        sent = 0
        for reminder in await self.db.run(self.db.reminders.due, self.clock(), platforms):
            sent += await self.fire(reminder.id) in ("delivered", "late")
        return sent

    async def fire(self, reminder_id: str) -> str:
        """Deliver the reminder's current run if it is due and nobody else has; what
        happened ('delivered', 'late', 'failed', 'paused', 'unknown' or 'skipped').
        Logged under the reminder's own id, whatever woke it."""
        with logs.turn(f"reminder:{reminder_id}"):
            return await self._fire(reminder_id)

    async def _fire(self, reminder_id: str) -> str:
        reminder = await self.db.run(self.db.reminders.get, reminder_id)
        if reminder is None or reminder.platform not in self.router.adapters:
            return "skipped"  # another process's platform: its sweep will run it
        now = self.clock()
        claim = await self.db.run(
            self.db.reminders.claim, reminder_id, self.name, len(RETRY_DELAYS) + 1, now
        )
        if claim is None:  # not due (a stale wake-up: its own job will come), delivered,
            return "skipped"  # being delivered, or not ours to send again
        try:
            outcome = await self._run(claim, now)
        except Exception as exc:  # recorded, never lost silently
            logger.exception("reminder %s failed", reminder_id)
            outcome = await self.db.run(self._failed, claim, f"{type(exc).__name__}: {exc}", now)
        following = await self.db.run(self.db.reminders.get, reminder_id)
        if following is not None and following.status == "active":
            self.added(following)  # its next run (or the retry) wakes up on time too
        return outcome

    async def _run(self, claim: Claim, now: datetime) -> str:
        reminder, due = claim.reminder, as_utc(claim.due_at)
        person = await self.db.run(self.db.people.get_user, reminder.user_id)
        if person is None or person.status == "blocked":
            await self.db.run(self._pause, claim, "the person who set it is blocked", "blocked")
            return "paused"
        late = now - due > LATE_AFTER
        text = await self._text(reminder, due, late)
        adapter = self.router.adapters[reminder.platform]
        result = await self.router.delivery.send(adapter, _chat(reminder), text, None)
        finish = self.db.reminders.finish
        if result.ok:
            await self.db.run(
                finish, claim, "delivered", next_due=self._next(reminder, now), late=late
            )
            logger.info("reminder %s delivered%s", reminder.id, " (late)" if late else "")
            return "late" if late else "delivered"
        error = result.error or "not delivered"
        if result.outcome_unknown:  # it may be there: never sent twice
            await self.db.run(
                finish, claim, "unknown", next_due=self._next(reminder, now), error=error
            )
            return "unknown"
        if result.retryable:
            return await self.db.run(self._failed, claim, error, now)
        reason = f"the chat cannot be reached ({error})"
        await self.db.run(self._pause, claim, reason, error, status="failed")
        logger.warning("reminder %s paused: %s", reminder.id, reason)
        return "paused"

    def _pause(self, claim: Claim, reason: str, error: str, *, status: str = "skipped") -> None:
        """The reminder paused for `reason`, its run finished (it stays due)."""
        self.db.reminders.pause(claim.reminder.id, reason)
        self.db.reminders.finish(claim, status, next_due=as_utc(claim.due_at), error=error)

    def _failed(self, claim: Claim, error: str, now: datetime) -> str:
        """Tried again later ('failed'), or paused once the retries are used up."""
        if claim.attempt <= len(RETRY_DELAYS):
            retry_at = now + RETRY_DELAYS[claim.attempt - 1]
            self.db.reminders.finish(claim, "failed", next_due=None, error=error, retry_at=retry_at)
            return "failed"
        self._pause(claim, f"it could not be delivered ({error})", error, status="failed")
        logger.warning(
            "reminder %s paused after %d attempts: %s", claim.reminder.id, claim.attempt, error
        )
        return "paused"

    async def _text(self, reminder: Reminder, due: datetime, late: bool) -> str:
        note = f"_(late: this was due {local(due, reminder.timezone)})_\n\n" if late else ""
        if not reminder.prompt:
            return f"{note}⏰ **Reminder**: {reminder.text}"
        surface = Surface.recorded(
            reminder.platform, reminder.chat_type, reminder.chat_id, reminder.thread_id
        )
        key = f"reminder:{reminder.id}"
        conv = await self.db.run(self.agent.sessions.open, reminder.user_id, surface, key)
        result = await self.agent.turn(
            conv,
            f"[A scheduled task the user set up ({reminder.id}); do it now and answer them "
            "directly]\n"
            + fence("task", reminder.text, "the task, in the user's words when they set it up"),
            surface,
        )
        await self.db.run(self.agent.sessions.end, conv, "scheduled_task")
        if not result.ok:
            raise RuntimeError(result.text)
        return f"{note}⏰ {result.text}"

    def _next(self, reminder: Reminder, now: datetime) -> datetime | None:
        """A recurring reminder's next run after now (missed runs are not made up)."""
        if not reminder.cron:
            return None
        try:
            return next_run(reminder.cron, zone(reminder.timezone), now)
        except (TimeError, ValueError):
            logger.warning("reminder %s has an unusable schedule: stopping it", reminder.id)
            return None

    # -- scheduling ----------------------------------------------------------------------

    def added(self, reminder: Reminder) -> None:
        """A reminder was just set in this process: wake up exactly when it is due."""
        if self.on_scheduled is not None:
            with contextlib.suppress(Exception):
                self.on_scheduled(reminder)


def _chat(reminder: Reminder) -> ChatRef:
    where = Surface.recorded(reminder.platform, reminder.chat_type, reminder.chat_id)
    return ChatRef(reminder.chat_id, where.chat_type, reminder.thread_id)


# -- the scheduler's stored jobs: module functions with persistable arguments ------------


async def fire_job(home: str, reminder_id: str) -> str:
    """The exact wake-up of one reminder (a DateTrigger job in the job store)."""
    runner = _RUNNERS.get(home)
    if runner is None:
        return "no runner in this process"
    return await runner.fire(reminder_id)


async def sweep_job(home: str) -> str:
    runner = _RUNNERS.get(home)
    if runner is None:
        return "no runner in this process"
    sent = await runner.sweep()
    if runner.router.confirmations is not None:  # messages asked for in another process
        sent += await runner.router.confirmations.sweep()
    return f"{sent} reminder(s) delivered" if sent else "nothing due"


__all__ = ["RETRY_DELAYS", "ReminderRunner", "fire_job", "sweep_job"]
