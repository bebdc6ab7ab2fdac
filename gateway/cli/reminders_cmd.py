"""`hermes reminders list|cancel`: everyone's reminders, for the operator."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from gateway.cli.context import EXIT_REFUSED, CliContext, fail
from gateway.cli.output import AsJson, new_table, note, print_json, print_table

app = typer.Typer(help="Reminders and scheduled messages people set.", no_args_is_help=True)


@app.command("list")
def list_(
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user (u_… or PLATFORM:ID).")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Done and cancelled ones too.")] = False,
    as_json: AsJson = False,
) -> None:
    """Reminders with their next run, where they go and whose they are."""
    from hermes.reminders import local

    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    user_id = None
    if user is not None:
        user_id = db.people.resolve(user)
        if user_id is None:
            fail(f"no user {user!r} (see hermes users list)", EXIT_REFUSED)
    items = db.reminders.of_user(user_id, live_only=not every)
    if as_json:
        print_json(
            [
                {
                    "id": r.id,
                    "user_id": r.user_id,
                    "status": r.status,
                    "reason": r.reason,
                    "next_run": r.due_at,
                    "timezone": r.timezone,
                    "cron": r.cron,
                    "prompt": r.prompt,
                    "text": r.text,
                    "platform": r.platform,
                    "chat_id": r.chat_id,
                    "runs": r.runs,
                }
                for r in items
            ]
        )
        return
    if not items:
        note("No reminders.")
        return
    table = new_table("id", "user", "next run (their time)", "schedule", "where", "status", "text")
    for r in items:
        table.add_row(
            r.id,
            r.user_id,
            f"{local(r.due_at, r.timezone)} {r.timezone}" if r.due_at else "-",
            escape(r.cron or "once") + (" · prompt" if r.prompt else ""),
            f"{r.platform}:{escape(r.chat_id)}",
            r.status + (f": {escape(r.reason)}" if r.reason else ""),
            escape(r.text[:60] + ("…" if len(r.text) > 60 else "")),
        )
    print_table(table)


@app.command()
def cancel(reminder_id: Annotated[str, typer.Argument(help="The reminder's id.")]) -> None:
    """Cancel a reminder (it will not run again)."""
    ctx = CliContext.load()
    db = ctx.open_db()
    gone = db.reminders.cancel(reminder_id)
    if gone is None:
        fail(f"no live reminder {reminder_id!r} (see hermes reminders list)", EXIT_REFUSED)
    note(f"Cancelled {gone.id} ({escape(gone.text[:60])}).")
