"""/timezone and /reminders: a person's time zone and their reminders, from the chat."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.commands.context import CommandContext
from hermes.reminders import TimeError, describe, zone
from hermes.state.db import SessionDB

NO_REMINDERS = (
    "You have no reminders. Ask me, e.g. “remind me tomorrow at 9 to call the bank” or "
    "“every Monday at 8, send me the week's plan”."
)


class ReminderCommands:
    def __init__(self, db: SessionDB) -> None:
        self.db = db

    async def timezone(self, ctx: CommandContext, name: str) -> str:
        user_id = ctx.person.user_id
        if not name:
            current = await self.db.run(self.db.reminders.timezone, user_id)
            if current is None:
                return (
                    "Your time zone is not set, so I only place relative times ('in 20 "
                    "minutes'). Set it with `/timezone Area/City`, e.g. `/timezone Europe/Berlin`."
                )
            now = datetime.now(UTC).astimezone(zone(current))
            return f"Your time zone is {current} (it is {now:%a %H:%M} there)."
        try:
            tz = zone(name)
        except TimeError as exc:
            return str(exc)
        await self.db.run(self.db.reminders.set_timezone, user_id, name.strip())
        now = datetime.now(UTC).astimezone(tz)
        return (
            f"Time zone set to {name.strip()} (it is {now:%a %H:%M} there). Reminders you "
            "set from now on use it."
        )

    async def list(self, ctx: CommandContext, _: str) -> str:
        items = await self.db.run(self.db.reminders.of_user, ctx.person.user_id)
        if not items:
            return NO_REMINDERS
        lines = [f"- {describe(r)}" for r in items]
        return "\n".join(["Your reminders:", *lines, "", "Cancel one with `/reminders cancel ID`."])

    async def cancel(self, ctx: CommandContext, reminder_id: str) -> str:
        if not reminder_id:
            return "Give the id: `/reminders cancel ID` (`/reminders` lists them)."
        gone = await self.db.run(self.db.reminders.cancel, reminder_id, ctx.person.user_id)
        if gone is None:
            return f"You have no live reminder `{reminder_id.strip().upper()}`."
        return f"Cancelled `{gone.id}` (“{gone.text[:60]}”)."
