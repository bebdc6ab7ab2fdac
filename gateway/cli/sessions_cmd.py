"""`hermes sessions ...`: browse, search, show, export, import and prune conversations."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, console, err_console, note, print_json, say

app = typer.Typer(help="Browse and search past conversations in state.db.", no_args_is_help=True)
UserOpt = Annotated[str | None, typer.Option("--user", help="User id (default: the owner).")]


@app.command("list")
def list_(
    platform: Annotated[str | None, typer.Option(help="Only this platform.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    user: UserOpt = None,
    as_json: AsJson = False,
) -> None:
    """The most recent sessions."""
    ctx = CliContext.load()
    db = ctx.open_db()
    chats = db.conversations.list_sessions(ctx.user_id(user), platform, limit)
    if as_json:
        print_json(
            [
                {
                    "session_id": chat.id,
                    "platform": chat.platform,
                    "chat_type": chat.chat_type,
                    "last_active_at": chat.last_active_at,
                    "messages": chat.message_count,
                    "title": chat.title,
                }
                for chat in chats
            ]
        )
        return
    table = Table()
    for column in ("session", "platform", "last active", "messages", "title"):
        table.add_column(column)
    for chat in chats:
        table.add_row(
            chat.id,
            f"{chat.platform}/{chat.chat_type}",
            f"{chat.last_active_at:%Y-%m-%d %H:%M}",
            str(chat.message_count),
            escape(chat.title),
        )
    console.print(table)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Plain words; empty lists recent sessions.")],
    limit: Annotated[int, typer.Option(min=1, max=10)] = 3,
    platform: Annotated[str | None, typer.Option(help="Only this platform.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the tool's exact result.")] = False,
    no_summary: Annotated[bool, typer.Option("--no-summary", help="Skip LLM summaries.")] = False,
    user: UserOpt = None,
) -> None:
    """Search past conversations the way the agent's session_search tool does."""
    import asyncio

    from hermes.state.search import SearchScope
    from hermes.tools.session_search import SessionSearchTool

    ctx = CliContext.load()
    db = ctx.open_db()
    summarizer = None if no_summary else ctx.summarizer()
    tool = SessionSearchTool(db, SearchScope(ctx.user_id(user)), summarizer, ctx.summary_policy())
    result = asyncio.run(tool.run({"query": query, "limit": limit, "platform": platform}))
    if as_json:
        print_json(result)
    elif not result["success"]:
        fail(result["error"], EXIT_REFUSED)
    elif not result["results"]:
        note("[dim]No matching sessions.[/dim]")
    else:
        for item in result["results"]:
            _print_result(item)


def _print_result(item: dict[str, Any]) -> None:
    when = item.get("when") or item.get("last_active")
    title = escape(str(item["title"]))
    note(f"[bold]{item['session_id']}[/bold] {item['platform']} {when} — {title}")
    for line in item.get("snippets") or [item.get("preview", "")]:
        note(f"  • {escape(str(line))}")
    if item.get("summary"):
        note(f"  [green]summary:[/green] {escape(str(item['summary']))}")
    elif item.get("excerpt"):
        note(f"  [dim]{escape(str(item['summary_note']))}:[/dim] {escape(str(item['excerpt']))}")


@app.command()
def show(session_id: str, user: UserOpt = None) -> None:
    """Every message of one session."""
    from hermes.state.transfer import export_markdown

    ctx = CliContext.load()
    db = ctx.open_db()
    user_id = ctx.user_id(user)
    chat = db.conversations.get_session(session_id, user_id)
    if chat is None:
        fail(f"no session {session_id!r} for this user", EXIT_REFUSED)
    say(export_markdown(chat, db.conversations.messages(chat.id, user_id)))


@app.command()
def export(
    session_id: Annotated[str | None, typer.Argument(help="One session (or --all).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every session of the user.")] = False,
    fmt: Annotated[str, typer.Option("--format", help="jsonl or md.")] = "jsonl",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File (default: stdout).")
    ] = None,
    user: UserOpt = None,
) -> None:
    """Export sessions as JSONL (re-importable) or Markdown."""
    from hermes.state.transfer import export_lines, export_markdown

    if fmt not in ("jsonl", "md") or bool(session_id) == all_:
        fail("give one SESSION_ID or --all, and --format jsonl|md", EXIT_USAGE)
    ctx = CliContext.load()
    db = ctx.open_db()
    user_id = ctx.user_id(user)
    chats = (
        db.conversations.list_sessions(user_id, limit=10**9)
        if all_
        else [db.conversations.get_session(session_id or "", user_id)]
    )
    if not chats or chats[0] is None:
        fail(f"no session {session_id!r} for this user", EXIT_REFUSED)
    sink = output.open("w", encoding="utf-8") if output else sys.stdout
    try:
        with Progress(console=err_console, transient=True, disable=len(chats) < 20) as progress:
            task = progress.add_task("exporting", total=len(chats))
            for chat in reversed(chats):
                assert chat is not None
                messages = db.conversations.messages(chat.id, user_id)
                if fmt == "jsonl":
                    sink.writelines(line + "\n" for line in export_lines(chat, messages))
                else:
                    sink.write(export_markdown(chat, messages) + "\n\n")
                progress.advance(task)
    finally:
        if output:
            sink.close()


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    user: UserOpt = None,
) -> None:
    """Load a JSONL export (or any JSONL of OpenAI-shape messages with session ids)."""
    from hermes.state.transfer import TransferError, import_sessions, parse_jsonl

    ctx = CliContext.load()
    db = ctx.open_db()
    user_id = ctx.user_id(user)
    db.people.ensure_user(user_id)
    try:
        with file.open(encoding="utf-8") as handle:
            sessions = parse_jsonl(handle)
    except (TransferError, UnicodeDecodeError) as exc:
        fail(f"{file}: {exc}; nothing was imported", EXIT_REFUSED)
    stored = import_sessions(db, user_id, sessions)
    note(f"[green]✓[/green] imported {len(sessions)} sessions, {stored} messages")


@app.command()
def prune(
    older_than: Annotated[
        int, typer.Option("--older-than", min=1, help="Days since last activity.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count.")] = False,
    user: UserOpt = None,
) -> None:
    """Delete sessions (and their messages) inactive for more than DAYS."""
    ctx = CliContext.load()
    db = ctx.open_db()
    count = db.upkeep.prune(older_than, dry_run, ctx.user_id(user) if user else None)
    verb = "would delete" if dry_run else "deleted"
    note(f"{verb} {count} session(s) inactive for more than {older_than} days")
