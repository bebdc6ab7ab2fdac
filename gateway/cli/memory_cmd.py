"""`hermes memory ...`: inspect and edit a person's stores through the tool's code path."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import (
    AsJson,
    new_table,
    note,
    print_json,
    print_table,
    progress_bar,
    say,
)
from hermes.memory.store import Target

if TYPE_CHECKING:  # imported where used: `hermes memory add` starts fast
    from hermes.llm.client import LLMClient
    from hermes.memory.service import MemoryService, PendingReport, StoreStatus
    from hermes.memory.sweep import StoreRun
    from hermes.memory.tool import ToolOutcome
    from hermes.memory.user_memory import UserMemory
    from hermes.state.db import SessionDB

app = typer.Typer(
    help="Inspect and edit the bounded MEMORY.md / USER.md stores.", no_args_is_help=True
)

UserOpt = Annotated[str | None, typer.Option("--user", help="User id (default: the owner).")]
TargetOpt = Annotated[Target, typer.Option("--target", "-t", help="memory or user.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print exactly the tool's JSON result.")]


def _memory(user: str | None, ctx: CliContext | None = None) -> UserMemory:
    ctx = ctx or CliContext.load()
    return ctx.memory(ctx.open_db()).of(ctx.user_id(user))


@app.command()
def status(
    user: UserOpt = None,
    all_users: Annotated[
        bool, typer.Option("--all", help="A table of every user's usage, fullest first.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Usage per store: chars used / limit, percent and entry count."""

    ctx = CliContext.load(reading=True)
    service = ctx.memory(ctx.open_db())
    if as_json:
        users = _everyone(service) if all_users else [ctx.user_id(user)]
        print_json({user_id: service.status(user_id) for user_id in users})
        return
    if all_users:
        _status_all(ctx, service)
        return
    user_id = ctx.user_id(user)
    table = new_table(
        "store",
        "used / limit",
        "percent",
        "entries",
        "last consolidation",
        "note",
        title=f"Memory of {user_id}",
    )
    for store in service.status(user_id):
        if not store.enabled:
            table.add_row(store.target.value, "-", "-", "-", "-", "disabled")
            continue
        last = "-"
        if store.last_consolidated_at:
            last = f"{store.last_consolidated_at:%Y-%m-%d %H:%M} ({store.last_summary})"
        table.add_row(
            store.target.value,
            f"{store.used:,} / {store.limit:,}",
            f"{store.percent}%",
            str(store.entries),
            last,
            _remark(store),
        )
    print_table(table)
    from gateway.commands.memory import provider_line

    if held := service.held_writes(user_id):
        note(
            f"[yellow]{held} write(s) waiting for the safety check[/yellow] (hermes memory pending)"
        )
    note(f"Provider: {escape(provider_line(service.providers.status(user_id)))}")


@app.command()
def pending(
    retry: Annotated[
        bool, typer.Option("--retry", help="Ask the model to judge them again now.")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Show at most this many.")] = 50,
    as_json: AsJson = False,
) -> None:
    """Memory writes held because the safety check's model could not answer: none of
    them is in any prompt until the model has judged it (oldest first)."""
    import asyncio

    ctx = CliContext.load(reading=not retry)
    db = ctx.open_db()
    if retry:
        report = asyncio.run(_settle(ctx, db))
        note(f"Judged again: {report.describe()}")
    rows = db.memory_log.pending_writes(limit=limit)
    more = db.memory_log.count_pending() - len(rows)
    if as_json:
        print_json([row.model_dump(mode="json") for row in rows])
        return
    if not rows:
        note("No memory writes are waiting for the safety check.")
        return
    table = new_table("id", "user", "since", "tries", "write", "why it waits", title="Held writes")
    for row in rows:
        args = json.loads(row.args)
        what = f"{args.get('action')} {args.get('target')}: {args.get('content', '')}"
        since = f"{row.created_at:%Y-%m-%d %H:%M}"
        table.add_row(str(row.id), row.user_id, since, str(row.attempts), what, row.reason)
    print_table(table)
    if more > 0:
        note(f"… and {more} more (--limit {limit + more} shows them all)")


async def _settle(ctx: CliContext, db: SessionDB) -> PendingReport:
    async with ctx.memory_at_work(db, ctx.auxiliary_model(db)) as service:
        return await service.settle_pending()


def _remark(store: StoreStatus) -> str:
    remark = escape(store.remark())
    if not remark:
        return ""
    return f"[red]{remark}[/red]" if store.damage else f"[yellow]{remark}[/yellow]"


def _everyone(service: MemoryService) -> list[str]:
    """The people `status --all` lists, in its table and its JSON alike: everyone known,
    and anyone with memory files the database does not name."""
    known = {summary.user.id for summary in service.db.people.users()}
    return sorted(known | set(service.users()))


def _status_all(ctx: CliContext, service: MemoryService) -> None:
    names = {s.user.id: s.user.display_name for s in service.db.people.users()}
    rows = []
    for user_id in _everyone(service):
        stores = {s.target: s for s in service.status(user_id)}
        fill = max(s.percent for s in stores.values())
        rows.append((fill, user_id, stores))
    table = new_table(
        "user",
        "name",
        "memory",
        "user profile",
        "entries",
        "note",
        title="Memory of every user (fullest first)",
    )
    for _, user_id, stores in sorted(rows, key=lambda row: (-row[0], row[1])):
        notes = []
        for target, store in stores.items():
            if remark := store.remark():
                notes.append(f"{target.value}: {escape(remark)}")
        mem, prof = stores[Target.MEMORY], stores[Target.USER]
        table.add_row(
            user_id,
            escape(names.get(user_id, "")),
            f"{mem.used:,}/{mem.limit:,} ({mem.percent}%)" if mem.enabled else "disabled",
            f"{prof.used:,}/{prof.limit:,} ({prof.percent}%)" if prof.enabled else "disabled",
            f"{mem.entries} + {prof.entries}",
            "; ".join(notes),
        )
    print_table(table)


@app.command()
def show(
    target: Annotated[Target | None, typer.Argument(help="memory or user (default: both).")] = None,
    rendered: Annotated[
        bool, typer.Option("--rendered", help="Print the exact block the prompt gets.")
    ] = False,
    user: UserOpt = None,
    as_json: AsJson = False,
) -> None:
    """List the entries of a store (or both)."""
    from hermes.memory.render import render
    from hermes.memory.scanner import scan

    memory = _memory(user, CliContext.load(reading=True))
    targets = [target] if target else memory.enabled_targets()
    if as_json:
        shown: dict[str, object] = {}
        for one in targets:
            state = memory.store(one).read() if memory.enabled(one) else None
            shown[one.value] = (
                None
                if state is None
                else {
                    "entries": list(state.entries),
                    "used": state.used,
                    "limit": state.limit,
                    "percent": state.percent,
                    "blocked": [e for e in state.entries if scan(e) is not None],
                }
            )
        print_json(shown)
        return
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
    """One tool operation through the memory service; a write that crosses the
    consolidation threshold runs the check before the command exits."""
    import asyncio

    ctx = CliContext.load()
    user_id = ctx.user_id(user)
    outcome = asyncio.run(_apply(ctx, user_id, args))
    if as_json:
        print_json(outcome.result)
    elif outcome.ok:
        note(f"[green]✓[/green] {escape(outcome.result['message'])} ({outcome.result['usage']})")
    elif outcome.result.get("pending"):
        note(f"[yellow]held[/yellow] {escape(outcome.result['error'])} (hermes memory pending)")
    else:
        note(f"[red]✗[/red] {escape(outcome.result['error'])}")
        for entry in outcome.result.get("current_entries", []) or outcome.result.get("matches", []):
            note(f"  • {escape(entry)}")
    if not outcome.ok:  # the disk refusing is an environment problem, not a refusal
        raise typer.Exit(EXIT_USAGE if outcome.result.get("storage_failure") else EXIT_REFUSED)


async def _apply(ctx: CliContext, user_id: str, args: dict[str, str]) -> ToolOutcome:
    db = ctx.open_db()
    async with ctx.memory_at_work(db, ctx.auxiliary_model(db)) as service:
        return await service.apply(user_id, args, actor="user")


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
    import asyncio

    ctx = CliContext.load()
    db = ctx.open_db()
    model = ctx.auxiliary_model(db)
    users = None if all_users else [ctx.user_id(user)]

    runs = asyncio.run(_consolidate(ctx, db, model, users, force))
    if not runs:
        service = ctx.memory(db)
        waiting = [
            f"{user_id} {store.target.value}: {store.remark()}"
            for user_id, store in service.over_threshold(users)
        ]
        if not waiting:
            note("[dim]Nothing to consolidate: every store is under the threshold.[/dim]")
        for line in waiting:  # over it, but waiting out the pause after a failed attempt
            note(f"[yellow]{escape(line)}[/yellow]: retried later by itself; --force tries now")
    for run in runs:
        colour = "green" if run.outcome.status == "applied" else "yellow"
        detail = f" — {escape(run.outcome.detail)}" if run.outcome.detail else ""
        note(f"{run.user_id} {run.target.value}: [{colour}]{run.outcome.status}[/{colour}]{detail}")
    if any(run.outcome.status not in ("applied", "below_threshold") for run in runs):
        raise typer.Exit(EXIT_REFUSED)


async def _consolidate(
    ctx: CliContext, db: SessionDB, model: LLMClient | None, users: list[str] | None, force: bool
) -> list[StoreRun]:
    async with ctx.memory_at_work(db, model) as service:
        with progress_bar("consolidating") as advance:
            return await service.check(users, force=force, progress=advance)


@app.command()
def undo(user: UserOpt = None, as_json: AsJson = False) -> None:
    """Revert the last change to memory (a consolidation included), exactly."""
    import asyncio

    ctx = CliContext.load()

    async def undo_last(user_id: str) -> tuple[bool, str]:
        async with ctx.memory_at_work(ctx.open_db()) as service:
            return await service.undo(user_id)

    done, message = asyncio.run(undo_last(ctx.user_id(user)))
    if as_json:
        print_json({"done": done, "message": message})
    else:
        tick = f"[green]✓[/green] {escape(message)}"
        note(tick if done else f"[yellow]{escape(message)}[/yellow]")
    if not done:
        raise typer.Exit(EXIT_REFUSED)


@app.command()
def why(
    text: Annotated[str, typer.Argument(help="Text of (part of) an entry.")],
    user: UserOpt = None,
    as_json: AsJson = False,
) -> None:
    """Provenance: which conversation produced an entry, and every change to it."""
    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    changes = ctx.memory(db).why(ctx.user_id(user), text)
    if as_json:
        print_json([change.as_json() for change in changes])
        raise typer.Exit(0 if changes else EXIT_REFUSED)
    if not changes:
        note(f"[dim]No recorded change mentions {escape(repr(text))}.[/dim]")
        raise typer.Exit(EXIT_REFUSED)
    for change in changes:
        what = f"{change.action} in {change.target} by {change.actor}"
        note(f"[bold]{change.at:%Y-%m-%d %H:%M UTC}[/bold] {what}")
        if change.before:
            note(f"  [red]- {escape(change.before)}[/red]")
        if change.after:
            note(f"  [green]+ {escape(change.after)}[/green]")
        source = change.source
        if source is None:
            note("  [dim]source: not from a conversation (CLI or unknown)[/dim]")
            continue
        started = f"{source.started_at:%Y-%m-%d}"
        title = escape(source.title)
        note(f"  source: session {source.session_id} on {source.platform}, {started} — {title}")
        if source.message is not None:
            note(f"  message: {escape(source.message_role or '')}: {escape(source.message[:200])}")


FilesOpt = Annotated[
    Path,
    typer.Option("--files", help="A folder: <user id>/MEMORY.md and USER.md in it, per person."),
]


@app.command()
def export(
    files: FilesOpt,
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user id (default: everyone).")
    ] = None,
) -> None:
    """Write the stores out as real MEMORY.md / USER.md files (wherever they are kept:
    files or the database), exactly as the store holds them, for reading or editing;
    `hermes memory import` loads them back."""
    ctx = CliContext.load(reading=True)
    service = ctx.memory(ctx.open_db())
    users = [ctx.user_id(user)] if user else service.users()
    written = 0
    try:
        files.mkdir(mode=0o700, parents=True, exist_ok=True)
        for user_id in users:
            memory = service.of(user_id)
            folder = files / user_id
            for target in Target:
                state = memory.file_store(target).read()
                for name, text in (
                    (target.filename, state.raw),
                    (f"{target.filename}.pending", state.pending_raw),
                ):
                    if text:
                        folder.mkdir(mode=0o700, exist_ok=True)
                        _write_private(folder / name, text)
                        written += 1
    except OSError as exc:
        fail(f"cannot write {exc.filename or files}: {exc.strerror}", EXIT_USAGE)
    note(f"[green]✓[/green] {written} files for {len(users)} people in {escape(str(files))}")


@app.command(name="import")
def import_files(
    files: Annotated[
        Path, typer.Argument(help="A folder written by `hermes memory export --files`.")
    ],
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user id (default: every folder).")
    ] = None,
) -> None:
    """Load MEMORY.md / USER.md files into the stores: each store then holds its file
    exactly (recorded as a change by the admin: `hermes memory undo` reverts it)."""
    from hermes.identity import InvalidUserIdError, validate_user_id
    from hermes.memory.store import StoreError

    ctx = CliContext.load()
    service = ctx.memory(ctx.open_db())
    if not files.is_dir():
        fail(f"{files} is not a folder (write one with `hermes memory export --files`)", EXIT_USAGE)
    folders = [files / user] if user else sorted(p for p in files.iterdir() if p.is_dir())
    refused = 0
    for folder in folders:
        try:
            user_id = validate_user_id(folder.name)
        except InvalidUserIdError:
            note(f"[yellow]skipped {escape(folder.name)}: not a user id[/yellow]")
            continue
        for target in Target:
            try:
                text = _read_or_empty(folder / target.filename)
                pending = _read_or_empty(folder / f"{target.filename}.pending")
                if text is None and pending is None:
                    continue
                done = service.load(user_id, target, text or "", pending or "")
                note(f"{user_id} {target.filename}: {escape(done)}")
            except (StoreError, UnicodeDecodeError, OSError) as exc:
                refused += 1
                note(f"[red]{user_id} {target.filename}: {escape(str(exc))}[/red]")
    if refused:
        raise typer.Exit(EXIT_REFUSED)


def _read_or_empty(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


__all__ = ["EXIT_USAGE", "app", "fail"]
