"""`hermes memory ...`: inspect and edit a person's stores through the tool's code path."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import console, note, print_json, say
from hermes.llm.client import LLMClient
from hermes.memory import sweep
from hermes.memory.journal import run_recorded
from hermes.memory.render import render
from hermes.memory.scanner import scan
from hermes.memory.store import Target
from hermes.memory.tool import MemoryTool
from hermes.memory.undo import undo_last
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from hermes.state.people import PeopleDB

app = typer.Typer(
    help="Inspect and edit the bounded MEMORY.md / USER.md stores.", no_args_is_help=True
)

WARN_PERCENT = 80
UserOpt = Annotated[str | None, typer.Option("--user", help="User id (default: the owner).")]
TargetOpt = Annotated[Target, typer.Option("--target", "-t", help="memory or user.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly the tool's JSON result.")]


def _memory(user: str | None, ctx: CliContext | None = None) -> UserMemory:
    ctx = ctx or CliContext.load()
    return UserMemory(ctx.home, ctx.user_id(user), ctx.config.memory)


@app.command()
def status(
    user: UserOpt = None,
    all_users: Annotated[
        bool, typer.Option("--all", help="A table of every user's usage, fullest first.")
    ] = False,
) -> None:
    """Usage per store: chars used / limit, percent and entry count."""
    if all_users:
        _status_all()
        return
    memory = _memory(user)
    table = Table(title=f"Memory of {memory.user_id}")
    for column in ("store", "used / limit", "percent", "entries", "last consolidation", "note"):
        table.add_column(column)
    db = CliContext.load().open_db()
    for target in Target:
        if not memory.enabled(target):
            table.add_row(target.value, "-", "-", "-", "-", "disabled")
            continue
        state = memory.store(target).read()
        bookkeeping = db.consolidation_state(memory.user_id, target.value)
        last = "-"
        if bookkeeping.last_consolidated_at:
            last = f"{bookkeeping.last_consolidated_at:%Y-%m-%d %H:%M} ({bookkeeping.last_summary})"
        remark = ""
        if state.damage:
            remark = f"[red]needs fixing by hand: {escape(state.damage)}[/red]"
        elif bookkeeping.needs_consolidation:
            remark = (
                f"[yellow]needs consolidation ({escape(bookkeeping.last_error or '')})[/yellow]"
            )
        elif state.percent >= WARN_PERCENT:
            remark = f"[yellow]{state.percent}% full: merge or remove entries[/yellow]"
        table.add_row(
            target.value,
            f"{state.used:,} / {state.limit:,}",
            f"{state.percent}%",
            str(len(state.entries)),
            last,
            remark,
        )
    console.print(table)


def _status_all() -> None:
    ctx = CliContext.load()
    db = ctx.open_db()
    names = {s.user.id: s.user.display_name for s in PeopleDB(db).users()}
    rows = []
    for user_id in sorted(set(names) | set(sweep.users_with_memory(ctx.home))):
        memory = UserMemory(ctx.home, user_id, ctx.config.memory)
        states = {t: memory.file_store(t).read() for t in Target}
        fill = max(state.used * 100 / state.limit for state in states.values())
        rows.append((fill, user_id, states))
    table = Table(title="Memory of every user (fullest first)")
    for column in ("user", "name", "memory", "user profile", "entries", "note"):
        table.add_column(column)
    for _, user_id, states in sorted(rows, key=lambda row: (-row[0], row[1])):
        notes = []
        for target, state in states.items():
            book = db.consolidation_state(user_id, target.value)
            if state.damage:
                notes.append(f"{target.value}: needs fixing by hand")
            elif state.pending or book.needs_consolidation:
                notes.append(f"{target.value}: needs consolidation")
        memory_state, user_state = states[Target.MEMORY], states[Target.USER]
        table.add_row(
            user_id,
            escape(names.get(user_id, "")),
            f"{memory_state.used:,}/{memory_state.limit:,} ({memory_state.percent}%)",
            f"{user_state.used:,}/{user_state.limit:,} ({user_state.percent}%)",
            f"{len(memory_state.entries)} + {len(user_state.entries)}",
            "; ".join(notes),
        )
    console.print(table)


@app.command()
def show(
    target: Annotated[Target | None, typer.Argument(help="memory or user (default: both).")] = None,
    rendered: Annotated[
        bool, typer.Option("--rendered", help="Print the exact block the prompt gets.")
    ] = False,
    user: UserOpt = None,
) -> None:
    """List the entries of a store (or both)."""
    memory = _memory(user)
    targets = [target] if target else memory.enabled_targets()
    for one in targets:
        state = memory.store(one).read() if memory.enabled(one) else None
        if state is None:
            note(f"[dim]{one.value}: disabled[/dim]")
        elif rendered:
            say(render(one, state))
        else:
            note(f"[bold]{one.heading}[/bold] [{state.usage_line()}]")
            for number, entry in enumerate(state.entries, 1):
                flag = scan(entry)
                mark = f" [red](blocked: {escape(flag.describe())})[/red]" if flag else ""
                note(f"[cyan]{number}.[/cyan] {escape(entry)}{mark}")
            if not state.entries:
                note("[dim](empty)[/dim]")


def _run(user: str | None, as_json: bool, **args: str) -> None:
    ctx = CliContext.load()
    db = ctx.open_db()
    memory = _memory(user, ctx)
    db.ensure_user(memory.user_id)
    outcome = run_recorded(MemoryTool(memory), db, args, actor="user")
    if as_json:
        print_json(outcome.result)
    elif outcome.ok:
        note(f"[green]✓[/green] {escape(outcome.result['message'])} ({outcome.result['usage']})")
    else:
        note(f"[red]✗[/red] {escape(outcome.result['error'])}")
        for entry in outcome.result.get("current_entries", []) or outcome.result.get("matches", []):
            note(f"  • {escape(entry)}")
    if not outcome.ok:
        raise typer.Exit(EXIT_REFUSED)


@app.command()
def add(
    content: Annotated[str, typer.Argument(help="The entry text.")],
    target: TargetOpt = Target.MEMORY,
    as_json: JsonOpt = False,
    user: UserOpt = None,
) -> None:
    """Add an entry (same checks as the agent's memory tool)."""
    _run(user, as_json, action="add", target=target.value, content=content)


@app.command()
def replace(
    old_text: Annotated[str, typer.Argument(help="Unique substring of the entry to replace.")],
    content: Annotated[str, typer.Argument(help="The new entry text.")],
    target: TargetOpt = Target.MEMORY,
    as_json: JsonOpt = False,
    user: UserOpt = None,
) -> None:
    """Replace the one entry containing OLD_TEXT with CONTENT."""
    _run(user, as_json, action="replace", target=target.value, old_text=old_text, content=content)


@app.command()
def remove(
    old_text: Annotated[str, typer.Argument(help="Unique substring of the entry to remove.")],
    target: TargetOpt = Target.MEMORY,
    as_json: JsonOpt = False,
    user: UserOpt = None,
) -> None:
    """Remove the one entry containing OLD_TEXT."""
    _run(user, as_json, action="remove", target=target.value, old_text=old_text)


@app.command()
def consolidate(
    user: UserOpt = None,
    all_users: Annotated[bool, typer.Option("--all", help="Every user with memory.")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Also stores under the threshold.")
    ] = False,
) -> None:
    """Consolidate stores over the threshold now (the scheduler does this by itself)."""
    ctx = CliContext.load()
    db = ctx.open_db()
    model = ctx.auxiliary_model()
    users = None if all_users else [ctx.user_id(user)]
    runs = asyncio.run(_consolidate(ctx, db, model, users, force))
    if not runs:
        note("[dim]Nothing to consolidate: every store is under the threshold.[/dim]")
    for run in runs:
        colour = "green" if run.outcome.status == "applied" else "yellow"
        detail = f" — {escape(run.outcome.detail)}" if run.outcome.detail else ""
        note(f"{run.user_id} {run.target.value}: [{colour}]{run.outcome.status}[/{colour}]{detail}")
    if any(run.outcome.status not in ("applied", "below_threshold") for run in runs):
        raise typer.Exit(EXIT_REFUSED)


async def _consolidate(
    ctx: CliContext, db: SessionDB, model: LLMClient | None, users: list[str] | None, force: bool
) -> list[sweep.StoreRun]:
    try:
        return await sweep.check(ctx.home, db, model, ctx.config.memory, users, force=force)
    finally:
        if model is not None:
            await model.close()


@app.command()
def undo(user: UserOpt = None) -> None:
    """Revert the last change to memory (a consolidation included), exactly."""
    ctx = CliContext.load()
    db = ctx.open_db()
    done, message = undo_last(_memory(user, ctx), db)
    note(f"[green]✓[/green] {escape(message)}" if done else f"[yellow]{escape(message)}[/yellow]")
    if not done:
        raise typer.Exit(EXIT_REFUSED)


@app.command()
def why(
    text: Annotated[str, typer.Argument(help="Text of (part of) an entry.")],
    user: UserOpt = None,
) -> None:
    """Provenance: which conversation produced an entry, and every change to it."""
    ctx = CliContext.load()
    db = ctx.open_db()
    user_id = ctx.user_id(user)
    events = db.memory_events(user_id, text)
    if not events:
        note(f"[dim]No recorded change mentions {escape(repr(text))}.[/dim]")
        raise typer.Exit(EXIT_REFUSED)
    for event in events:
        stamp = event.created_at.strftime("%Y-%m-%d %H:%M UTC")
        note(f"[bold]{stamp}[/bold] {event.action} in {event.target} by {event.actor}")
        if event.entry_before:
            note(f"  [red]- {escape(event.entry_before)}[/red]")
        if event.entry_after:
            note(f"  [green]+ {escape(event.entry_after)}[/green]")
        _explain_source(db, user_id, event.session_id, event.message_id)


def _explain_source(
    db: SessionDB, user_id: str, session_id: str | None, message_id: int | None
) -> None:
    chat = db.get_session(session_id, user_id) if session_id else None
    if chat is None:
        note("  [dim]source: not from a conversation (CLI or unknown)[/dim]")
        return
    started = f"{chat.started_at:%Y-%m-%d}"
    note(f"  source: session {chat.id} on {chat.platform}, {started} — {escape(chat.title)}")
    message = db.message(message_id, user_id) if message_id else None
    if message is not None:
        note(f"  message: {escape(message.role)}: {escape(message.content[:200])}")


__all__ = ["EXIT_USAGE", "app", "fail"]
