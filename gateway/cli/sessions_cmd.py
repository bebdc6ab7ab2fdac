"""`hermes sessions ...`: browse, search, show, export, import and prune conversations."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from rich.markup import escape

from gateway.cli.complete import EXPORT_FORMATS, SURFACES
from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, new_table, note, print_json, print_table, progress_bar, say

if TYPE_CHECKING:
    from hermes.state.db import SessionDB

app = typer.Typer(help="Browse and search past conversations in state.db.", no_args_is_help=True)
UserOpt = Annotated[str | None, typer.Option("--user", help="User id (default: the owner).")]


@app.command("list")
def list_(
    platform: Annotated[
        str | None, typer.Option(help="Only this platform.", autocompletion=SURFACES.complete)
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    user: UserOpt = None,
    all_users: Annotated[
        bool, typer.Option("--all", help="Everyone's sessions (with whose each is).")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """The most recent sessions (the owner's, one user's, or everyone's)."""
    ctx = CliContext.load(reading=True)
    if all_users and user:
        fail("--all or --user, not both", EXIT_USAGE)
    db = ctx.open_db()
    who = None if all_users else ctx.user_id(user)
    chats = db.conversations.list_sessions(who, platform, limit)
    if as_json:
        print_json(
            [
                {
                    "session_id": chat.id,
                    "user_id": chat.user_id,
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
    if not chats:
        whose = "anyone" if who is None else f"user {who}"
        note(f"[dim]No sessions for {whose} in {ctx.home}.[/dim]")
        return
    columns = ["session", *(["user"] if who is None else []), "platform", "last active"]
    table = new_table(*columns, "messages", "title")
    for chat in chats:
        table.add_row(
            chat.id,
            *([chat.user_id] if who is None else []),
            f"{chat.platform}/{chat.chat_type}",
            f"{chat.last_active_at:%Y-%m-%d %H:%M}",
            str(chat.message_count),
            escape(chat.title),
        )
    print_table(table)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Plain words; empty lists recent sessions.")],
    limit: Annotated[int, typer.Option(min=1, max=10)] = 3,
    platform: Annotated[
        str | None, typer.Option(help="Only this platform.", autocompletion=SURFACES.complete)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the tool's exact result.")] = False,
    no_summary: Annotated[bool, typer.Option("--no-summary", help="Skip LLM summaries.")] = False,
    user: UserOpt = None,
) -> None:
    """Search past conversations the way the agent's session_search tool does."""
    import asyncio

    from gateway.app import build_embedder
    from hermes.state.search import SearchScope
    from hermes.tools.session_search import SessionSearchTool

    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    summarizer = None if no_summary else ctx.summarizer()
    scope = SearchScope(ctx.user_id(user))
    embedder = build_embedder(ctx.config, db)  # hybrid when search.embeddings is on
    reranker = None if no_summary else ctx.reranker()  # (--no-summary: no model at all)
    tool = SessionSearchTool(
        db, scope, summarizer, ctx.summary_policy(), embedder=embedder, reranker=reranker
    )

    async def run() -> dict[str, Any]:
        try:
            return await tool.run({"query": query, "limit": limit, "platform": platform})
        finally:
            if embedder is not None:
                await embedder.close()
            if reranker is not None:
                await reranker.client.close()

    result = asyncio.run(run())
    if as_json:
        print_json(result)
    elif not result["success"]:
        fail(result["error"], EXIT_REFUSED)
    elif not result["results"]:
        note(f"[dim]No matching sessions in {ctx.home}.[/dim]")
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
def show(session_id: str, user: UserOpt = None, as_json: AsJson = False) -> None:
    """Every message of one session."""
    import json

    from hermes.state.transfer import export_lines, export_markdown

    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    user_id = ctx.user_id(user)
    chat = db.conversations.get_session(session_id, user_id)
    if chat is None:
        fail(f"no session {session_id!r} for user {user_id} in {ctx.home}", EXIT_REFUSED)
    messages = db.conversations.messages(chat.id, user_id)
    if as_json:  # the lines `export` writes for it: one object per message
        print_json([json.loads(line) for line in export_lines(chat, messages)])
        return
    say(export_markdown(chat, messages))


@app.command()
def export(
    session_id: Annotated[str | None, typer.Argument(help="One session (or --all).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every session of the user.")] = False,
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help=f"{EXPORT_FORMATS.words}.", autocompletion=EXPORT_FORMATS.complete
        ),
    ] = "jsonl",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File, written 0600 (default: stdout).")
    ] = None,
    with_memory: Annotated[
        bool, typer.Option("--with-memory", help="Also the user's MEMORY.md / USER.md entries.")
    ] = False,
    user: UserOpt = None,
) -> None:
    """Export sessions as JSONL (re-importable) or Markdown."""
    from hermes.state.transfer import export_lines, export_markdown

    if fmt not in EXPORT_FORMATS or bool(session_id) == all_:
        fail(f"give one SESSION_ID or --all, and --format {EXPORT_FORMATS.words}", EXIT_USAGE)
    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    user_id = ctx.user_id(user)
    chats = (
        db.conversations.list_sessions(user_id, limit=10**9)
        if all_
        else [db.conversations.get_session(session_id or "", user_id)]
    )
    if not chats or chats[0] is None:
        what = f"session {session_id!r}" if session_id else "session"
        fail(f"no {what} for user {user_id} in {ctx.home}", EXIT_REFUSED)
    sink = _private_output(output) if output else sys.stdout
    try:
        with progress_bar("exporting") as advance:
            for done, chat in enumerate(reversed(chats), 1):
                assert chat is not None
                messages = db.conversations.messages(chat.id, user_id)
                if fmt == "jsonl":
                    sink.writelines(line + "\n" for line in export_lines(chat, messages))
                else:
                    sink.write(export_markdown(chat, messages) + "\n\n")
                advance(done, len(chats))
            if with_memory:
                _export_memory(ctx, db, user_id, fmt, sink)
    finally:
        if output:
            sink.close()


def _private_output(path: Path) -> TextIO:
    """An export holds what people said: the file is created owner-only (0600)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}", EXIT_USAGE)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode otherwise
    return os.fdopen(fd, "w", encoding="utf-8")


def _export_memory(ctx: CliContext, db: SessionDB, user_id: str, fmt: str, sink: TextIO) -> None:
    from hermes.memory.user_memory import UserMemory
    from hermes.state.transfer import memory_lines

    memory = UserMemory(ctx.home, user_id, ctx.config.memory, db)
    for target in memory.enabled_targets():
        entries = memory.store(target).read().entries
        if fmt == "jsonl":
            sink.writelines(line + "\n" for line in memory_lines(target.value, entries))
        elif entries:
            sink.write(f"## {target.heading}\n\n" + "".join(f"- {e}\n" for e in entries) + "\n")


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    user: UserOpt = None,
    as_json: AsJson = False,
) -> None:
    """Load a JSONL export (or any JSONL of OpenAI-shape messages with session ids).

    Session ids are kept; importing the same file again stores nothing new. Memory lines
    (`export --with-memory`) go through the memory tool's checks."""
    import asyncio

    from hermes.state.transfer import TransferError, import_sessions, parse_jsonl

    ctx = CliContext.load()
    db = ctx.open_db()
    user_id = ctx.user_id(user)
    db.people.ensure_user(user_id)
    try:
        with file.open(encoding="utf-8") as handle:
            parsed = parse_jsonl(handle)
    except (TransferError, UnicodeDecodeError) as exc:
        fail(f"{file}: {exc}; nothing was imported", EXIT_REFUSED)
    with progress_bar("importing") as advance:
        report = import_sessions(db, user_id, parsed.sessions, advance)
    added, present, refused = 0, 0, list[tuple[str, str]]()
    if parsed.memory:
        added, present, refused = asyncio.run(_import_memory(ctx, db, user_id, parsed.memory))
    if as_json:
        print_json(
            {
                "sessions": report.sessions,
                "new_sessions": report.new_sessions,
                "messages_stored": report.stored,
                "messages_already_there": report.skipped,
                "memory": {
                    "added": added,
                    "already_there": present,
                    "refused": [{"entry": e, "why": why} for e, why in refused],
                },
            }
        )
        return
    note(
        f"[green]✓[/green] imported {report.sessions} sessions, {report.stored} messages "
        f"({report.new_sessions} new sessions, {report.skipped} messages already there)"
    )
    if parsed.memory:
        note(f"memory: {added} entries added, {present} already there, {len(refused)} refused")
        for entry, why in refused:
            note(f"  [yellow]✗[/yellow] {escape(entry[:80])}: {escape(why)}")


async def _import_memory(
    ctx: CliContext, db: SessionDB, user_id: str, entries: list[tuple[str, str]]
) -> tuple[int, int, list[tuple[str, str]]]:
    from hermes.memory.store import Target
    from hermes.memory.user_memory import UserMemory

    memory = UserMemory(ctx.home, user_id, ctx.config.memory, db)
    added, present, refused = 0, 0, []
    async with ctx.memory_at_work(db) as service:
        for target, content in entries:
            if content in memory.store(Target(target)).read().entries:
                present += 1
                continue
            args = {"action": "add", "target": target, "content": content}
            outcome = await service.apply(user_id, args, actor="user")
            if outcome.ok:
                added += 1
            else:
                refused.append((content, str(outcome.result.get("error", "refused"))))
    return added, present, refused


@app.command()
def prune(
    older_than: Annotated[
        int, typer.Option("--older-than", min=1, help="Days since last activity.")
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count.")] = False,
    all_users: Annotated[bool, typer.Option("--all", help="Every user's sessions.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    user: UserOpt = None,
) -> None:
    """Delete sessions (and their messages) inactive for more than DAYS: the owner's, or
    --user's, or with --all every user's. Asks first unless --yes."""
    if all_users and user:
        fail("give --user or --all, not both", EXIT_USAGE)
    ctx = CliContext.load()
    db = ctx.open_db()
    who = None if all_users else ctx.user_id(user)
    whose = "every user" if who is None else f"user {who}"
    count = db.upkeep.prune(older_than, dry_run=True, user_id=who)
    if dry_run or count == 0:
        verb = "would delete" if dry_run else "deleted"
        note(f"{verb} {count} session(s) of {whose} inactive for more than {older_than} days")
        return
    if not yes:
        try:
            confirmed = typer.confirm(f"Delete {count} session(s) of {whose} in {ctx.home}?")
        except typer.Abort:  # no answer: stdin closed or not a terminal
            fail(f"{count} session(s) of {whose} would be deleted: confirm, or --yes", EXIT_REFUSED)
        if not confirmed:
            note("nothing deleted")
            raise typer.Exit(EXIT_REFUSED)
    deleted = db.upkeep.prune(older_than, dry_run=False, user_id=who)
    note(f"deleted {deleted} session(s) of {whose} inactive for more than {older_than} days")


@app.command()
def reindex(
    embeddings: Annotated[
        bool, typer.Option("--embeddings", help="Embed every message that has no vector yet.")
    ] = False,
) -> None:
    """Build search indexes now: on PostgreSQL, the word index of what waits for it (after
    an upgrade or a bulk load; searches otherwise do it first). --embeddings: give every
    stored message its vector for hybrid search (search.embeddings), with progress; the
    gateway and the chat otherwise do it in the background. Interrupted, it continues
    where it stopped when run again."""
    import asyncio

    from gateway.app import build_embedder
    from hermes.llm.client import LLMError

    ctx = CliContext.load()
    db = ctx.open_db()
    if not embeddings and db.backend == "postgresql":  # what waits for the word index
        note(f"indexed {db.upkeep.index_search():,} messages for search")
        return
    if not embeddings:
        fail(
            "nothing to do: the word indexes are kept up to date by state.db itself; "
            "--embeddings embeds the history for hybrid search",
            EXIT_USAGE,
        )
    embedder = build_embedder(ctx.config, db)
    if embedder is None:
        fail(
            f"search.embeddings.model is not set in {ctx.home}: hybrid search is off "
            "(or set search.embeddings.provider: local, for a model in this process)",
            EXIT_USAGE,
        )
    done = 0

    async def run() -> int:
        nonlocal done
        try:
            previous = await asyncio.to_thread(db.vectors.activate, embedder.model)
            if previous not in (None, embedder.model):
                note(f"the vectors of {previous} were dropped: every message is embedded again")
            total = (await asyncio.to_thread(db.vectors.status)).queued
            with progress_bar(f"embedding with {embedder.model}") as advance:

                def step(count: int) -> None:
                    nonlocal done
                    done += count
                    advance(done, total)

                return await embedder.drain(progress=step)
        finally:
            await embedder.close()

    try:
        stored = asyncio.run(run())
    except LLMError as exc:
        fail(f"stopped after {done:,} messages: {exc} Run it again to continue.", EXIT_REFUSED)
    except KeyboardInterrupt:
        fail(f"interrupted after {done:,} messages; run it again to continue", EXIT_REFUSED)
    status = db.vectors.status()
    note(
        f"{stored:,} messages embedded with {embedder.model}; {status.embedded:,} in all, "
        f"{status.queued:,} queued"
    )
