"""The `schedule` tool: reminders and scheduled messages the assistant delivers itself.

One-off ("remind me tomorrow at 9 to call the bank") or recurring ("every Monday at 8,
send me the week's plan": a cron expression), in the person's own time zone, delivered
to the chat they were created in, as theirs. A recurring one may be a prompt: at each
run a short agent turn follows the instruction instead of sending fixed text. The time
zone is the person's setting (/timezone); the model sets it only when the person says
it, and a local time without one is refused with an explanation, never guessed.
The tool never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hermes.memory.scan_judge import Judge, Subject
from hermes.memory.scanner import scan
from hermes.places import Surface
from hermes.reminders import TimeError, check_cron, describe, local, parse_when, zone
from hermes.state.db import SessionDB
from hermes.state.models import Reminder
from hermes.state.reminders import new_reminder_id

MAX_PER_PERSON = 50
MAX_TEXT = 1000

SCHEDULE_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "schedule",
        "description": (
            "Reminders and scheduled messages that you deliver yourself, later, in this "
            "chat. action=add with `message` and either `when` (one-off) or `cron` "
            "(recurring, five fields in the user's time zone: '0 8 * * mon' = Mondays "
            "08:00). With prompt=true, each run is a short turn where you follow "
            "`message` as an instruction (e.g. 'send me the week's plan') instead of "
            "sending it as is. action=list shows the user's reminders; action=cancel "
            "takes an `id`. Times are the user's local time: pass `timezone` only when the "
            "user has told you theirs."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "list", "cancel"]},
                "message": {"type": "string", "description": "What to send (or do) then."},
                "when": {
                    "type": "string",
                    "description": (
                        "One-off: 'in 20 minutes', '09:30' (the next one), "
                        "'2026-12-24 09:00' (local), or ISO 8601 with an offset."
                    ),
                },
                "cron": {
                    "type": "string",
                    "description": "Recurring: minute hour day month weekday.",
                },
                "prompt": {"type": "boolean", "description": "Run `message` as an instruction."},
                "timezone": {
                    "type": "string",
                    "description": "The user's IANA zone, only when they said it (Europe/Berlin).",
                },
                "id": {"type": "string", "description": "cancel: the reminder's id."},
            },
            "required": ["action"],
            "additionalProperties": False,
        },
    },
}


@dataclass
class ScheduleTool:
    db: SessionDB
    user_id: str  # the person asking (the reminder is theirs)
    owner_id: str  # the owner of the session (the chat, in a shared group session)
    surface: Surface
    session_key: str
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    on_added: Callable[[Reminder], None] | None = None  # the scheduler learns of it
    judge: Judge | None = None  # a prompt reminder is judged like a memory write

    name = "schedule"
    schema = SCHEDULE_SCHEMA

    async def run(self, args: Mapping[str, Any]) -> dict[str, Any]:
        action = str(args.get("action") or "")
        try:
            if args.get("timezone"):
                self._set_timezone(str(args["timezone"]))
            if action == "add":
                return await self._add(args)
            if action == "list":
                return self._list()
            if action == "cancel":
                return self._cancel(str(args.get("id") or ""))
        except TimeError as exc:
            return {"success": False, "error": str(exc)}
        return {"success": False, "error": "action must be add, list or cancel."}

    def _set_timezone(self, name: str) -> None:
        zone(name)  # raises TimeError
        self.db.reminders.set_timezone(self.user_id, name.strip())

    async def _add(self, args: Mapping[str, Any]) -> dict[str, Any]:
        text = (
            " ".join(str(args.get("message") or "").split())
            if not args.get("prompt")
            else (str(args.get("message") or "").strip())
        )
        if not text:
            return {"success": False, "error": "Give the `message` to send (or do) then."}
        if len(text) > MAX_TEXT:
            return {"success": False, "error": f"The message is over {MAX_TEXT} characters."}
        if args.get("prompt") and (refused := await self._refused(text)) is not None:
            return {"success": False, "error": refused}
        tz_name = self.db.reminders.timezone(self.user_id)
        tz = zone(tz_name) if tz_name else None
        now = self.clock()
        when, cron = str(args.get("when") or "").strip(), str(args.get("cron") or "").strip()
        if bool(when) == bool(cron):
            return {
                "success": False,
                "error": "Give either `when` (one-off) or `cron` (recurring).",
            }
        if cron:
            if tz is None:
                raise TimeError(
                    "A recurring reminder runs on the user's local clock, and their time zone "
                    "is not known. Ask them for it and pass it as `timezone`. Do not guess it."
                )
            due = check_cron(cron, tz, now)
        else:
            due = parse_when(when, tz, now)
        reminder = self.db.reminders.add(
            MAX_PER_PERSON,
            Reminder(
                id=new_reminder_id(),
                user_id=self.user_id,
                owner_id=self.owner_id,
                platform=self.surface.platform,
                chat_id=self.surface.chat_id,
                chat_type=self.surface.kind,
                thread_id=self.surface.thread_id,
                session_key=self.session_key,
                text=text,
                prompt=bool(args.get("prompt")),
                cron=cron or None,
                timezone=tz_name or "UTC",
                due_at=due,
            ),
        )
        if reminder is None:
            return {
                "success": False,
                "error": f"The user has {MAX_PER_PERSON} reminders already: cancel some first.",
            }
        if self.on_added is not None:
            self.on_added(reminder)
        return {
            "success": True,
            "id": reminder.id,
            "next_run_local": local(due, reminder.timezone),
            "timezone": reminder.timezone,
            "recurring": bool(cron),
            "note": "Tell the user when it will come, and that /reminders lists them.",
        }

    async def _refused(self, task: str) -> str | None:
        """Why a prompt reminder (an agent turn in the person's name at every run) may
        not be saved: the memory guard's rules, then its model, as for a memory write."""
        finding = scan(task)
        if finding is None and self.judge is not None:
            verdict = await self.judge.check(task, Subject.TASK)
            if verdict.unavailable is not None:
                return (
                    f"Not saved: the safety check could not run ({verdict.unavailable}). "
                    "Try again in a little while."
                )
            finding = verdict.finding
        if finding is None:
            return None
        return f"Not saved: blocked by the security scan ({finding.describe()})."

    def _list(self) -> dict[str, Any]:
        items = self.db.reminders.of_user(self.user_id)
        return {"success": True, "count": len(items), "reminders": [describe(r) for r in items]}

    def _cancel(self, reminder_id: str) -> dict[str, Any]:
        if not reminder_id:
            return {"success": False, "error": "Give the `id` of the reminder to cancel."}
        gone = self.db.reminders.cancel(reminder_id, self.user_id)
        if gone is None:
            return {"success": False, "error": f"The user has no live reminder {reminder_id!r}."}
        return {"success": True, "cancelled": gone.id}


__all__ = ["SCHEDULE_SCHEMA", "ScheduleTool"]
