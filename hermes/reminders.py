"""Time for reminders: a person's time zone, when a one-off is due, when a recurring one
runs next, and how a reminder reads in a list.

Times are always computed in the person's own time zone (an IANA name they set; never
guessed) and stored in UTC. A recurring reminder is a five-field cron expression in that
zone (APScheduler's CronTrigger computes the next run, across daylight-saving changes).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hermes.state.models import Reminder, as_utc

MIN_INTERVAL = timedelta(minutes=5)  # a recurring reminder runs at most this often
MAX_AHEAD = timedelta(days=2 * 366)
# a run delivered later than this is marked late: an exact wake-up is on time within a
# second; a run only the 30 s sweep found (its instance died) is not
LATE_AFTER = timedelta(seconds=15)

NO_TIMEZONE = (
    "The user's time zone is not known, so a local time cannot be placed. Ask them for "
    "it (a city is enough: Europe/Berlin, America/New_York) and pass it as `timezone`, "
    "or use a relative time ('in 20 minutes'). Do not guess it."
)

_RELATIVE = re.compile(
    r"^in\s+(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hrs?|hours?|d|days?|w|weeks?)$",
    re.IGNORECASE,
)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})$")


class TimeError(ValueError):
    """A time, zone or schedule that cannot be used; the message says why (for the model)."""


def zone(name: str) -> ZoneInfo:
    """The IANA zone `name` ('Europe/Berlin'); TimeError when there is no such zone."""
    cleaned = name.strip()
    if cleaned.upper() in ("UTC", "Z", "GMT"):
        return ZoneInfo("UTC")
    try:
        if not cleaned or ("/" not in cleaned and cleaned != "UTC"):
            raise ZoneInfoNotFoundError(cleaned)
        return ZoneInfo(cleaned)
    except (ZoneInfoNotFoundError, ValueError):
        raise TimeError(
            f"{name!r} is not a time zone name. Use Area/City, like Europe/Berlin, "
            "America/New_York or Asia/Tokyo (or UTC)."
        ) from None


def parse_when(when: str, tz: ZoneInfo | None, now: datetime) -> datetime:
    """When a one-off reminder is due (UTC): 'in 20 minutes', 'HH:MM' (the next one in
    the person's zone), a local 'YYYY-MM-DD HH:MM', or ISO 8601 with an offset."""
    text = " ".join(when.strip().split())
    if match := _RELATIVE.match(text):
        unit = _UNITS[match.group(2)[0].lower()]
        due = now + timedelta(**{unit: float(match.group(1))})
        return _check(due, now)
    if match := _CLOCK.match(text):
        if tz is None:
            raise TimeError(NO_TIMEZONE)
        local_now = now.astimezone(tz)
        hour, minute = int(match.group(1)), int(match.group(2))
        if hour > 23 or minute > 59:
            raise TimeError(f"{when!r} is not a time of day.")
        due_local = local_now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if due_local <= local_now:
            due_local += timedelta(days=1)
        return _check(_fold(due_local.replace(tzinfo=None), tz), now)
    try:
        parsed = datetime.fromisoformat(text.replace(" ", "T", 1) if "T" not in text else text)
    except ValueError:
        raise TimeError(
            f"{when!r} is not a time I can read: use 'in 20 minutes', '09:30', "
            "'2026-12-24 09:00' (the user's local time) or ISO 8601 with an offset."
        ) from None
    if parsed.tzinfo is None:
        if tz is None:
            raise TimeError(NO_TIMEZONE)
        return _check(_fold(parsed, tz), now)
    return _check(parsed.astimezone(UTC), now)


def _fold(local: datetime, tz: ZoneInfo) -> datetime:
    """A naive local time in `tz`, as UTC; a time skipped by a DST change moves forward."""
    aware = local.replace(tzinfo=tz)
    roundtrip = aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
    if roundtrip != local:  # it does not exist (the clocks jumped over it)
        aware = (local + timedelta(hours=1)).replace(tzinfo=tz)
    return aware.astimezone(UTC)


def _check(due: datetime, now: datetime) -> datetime:
    if due <= now - timedelta(seconds=5):
        raise TimeError("That time has already passed; pick a time in the future.")
    if due - now > MAX_AHEAD:
        raise TimeError("That is more than two years ahead; pick a nearer time.")
    return due.astimezone(UTC)


def next_run(cron: str, tz: ZoneInfo, after: datetime) -> datetime | None:
    """The first run of `cron` (in `tz`) strictly after `after`, in UTC."""
    from apscheduler.triggers.cron import CronTrigger  # noqa: PLC0415 - on first use only

    trigger = CronTrigger.from_crontab(cron, timezone=tz)
    fire = trigger.get_next_fire_time(None, after + timedelta(microseconds=1))
    return fire.astimezone(UTC) if fire is not None else None


def check_cron(cron: str, tz: ZoneInfo, now: datetime) -> datetime:
    """The first run of a valid recurring schedule; TimeError when it is not one."""
    fields = cron.split()
    if len(fields) != 5:
        raise TimeError(
            f"{cron!r} is not a five-field cron expression (minute hour day month weekday), "
            "e.g. '0 8 * * mon' for every Monday at 08:00."
        )
    try:
        first = next_run(cron, tz, now)
    except ValueError as exc:
        raise TimeError(f"{cron!r} is not a valid schedule: {exc}") from None
    if first is None:
        raise TimeError(f"{cron!r} never runs.")
    if _shortest_gap(cron) < MIN_INTERVAL:
        raise TimeError("A recurring reminder may run at most every 5 minutes.")
    return first


def _shortest_gap(cron: str) -> timedelta:
    """The shortest time between two runs anywhere in the schedule, not only its first
    two ('2,8-59 * * * *' runs every minute after its second run).

    The gaps within a day come from the minute and hour fields alone, so they are found
    on one day of a schedule with the same times every day, from the first run of that
    day to the first of the next (the gap over midnight included: counted even when the
    day fields leave the next day out, which at worst refuses a rare valid schedule).
    The walk stops at the first short gap; a valid schedule has at most 288 runs a day."""
    from apscheduler.triggers.cron import CronTrigger  # noqa: PLC0415 - on first use only

    minute, hour = cron.split()[:2]
    daily = CronTrigger.from_crontab(f"{minute} {hour} * * *", timezone=UTC)
    day = datetime(2001, 1, 1, tzinfo=UTC)  # any day: every day has the same times
    first = daily.get_next_fire_time(None, day)
    shortest, previous = timedelta(days=1), first
    while previous is not None and previous <= first + timedelta(days=1):
        following = daily.get_next_fire_time(None, previous + timedelta(microseconds=1))
        if following is None:
            break
        shortest = min(shortest, following - previous)
        if shortest < MIN_INTERVAL:
            break
        previous = following
    return shortest


def local(moment: datetime, tz_name: str) -> str:
    """'Tue 02 Dec 09:00' in that zone."""
    return as_utc(moment).astimezone(zone(tz_name)).strftime("%a %d %b %H:%M")


def describe(reminder: Reminder) -> str:
    """One line for a list: id, next run (local), schedule, what it says."""
    what = " ".join(reminder.text.split())
    what = what if len(what) <= 80 else what[:79] + "…"
    kind = "runs" if reminder.prompt else "says"
    when = (
        f"next {local(reminder.due_at, reminder.timezone)}"
        if reminder.due_at is not None
        else reminder.status
    )
    schedule = f"every `{reminder.cron}`" if reminder.cron else "once"
    paused = f" · paused: {reminder.reason}" if reminder.status == "paused" else ""
    return (
        f"`{reminder.id}` · {when} ({reminder.timezone}) · {schedule} · {kind} “{what}”"
        f" · {reminder.platform}{paused}"
    )


__all__ = [
    "LATE_AFTER",
    "NO_TIMEZONE",
    "TimeError",
    "check_cron",
    "describe",
    "local",
    "next_run",
    "parse_when",
    "zone",
]
