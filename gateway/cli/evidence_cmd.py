"""`hermes evidence ...`: the evidence provider's store (files, facts, packs), per person."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gateway.cli.complete import FACT_STATUSES
from gateway.cli.context import CLI_PLATFORM, EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, new_table, note, print_json, print_table, progress_bar

if TYPE_CHECKING:
    from hermes.providers.evidence import EvidenceProvider

app = typer.Typer(
    help="Evidence: indexed files and conversations, and the facts that cite them.",
    no_args_is_help=True,
)
UserOpt = Annotated[str | None, typer.Option("--user", help="User id (default: the owner).")]


def _provider(user: str | None) -> EvidenceProvider:
    from hermes.providers.evidence import EvidenceProvider

    ctx = CliContext.load()
    ctx.open_db()  # on PostgreSQL, the evidence tables are in that database
    provider = EvidenceProvider()
    provider.initialize(
        "",
        hermes_home=ctx.home,
        platform=CLI_PLATFORM,
        user_id=ctx.user_id(user),
        agent_context="primary",
    )
    return provider


@app.command()
def index(
    paths: Annotated[list[Path], typer.Argument(help="Files and folders.")],
    max_kb: Annotated[int, typer.Option("--max-kb", min=1, help="Skip files over this.")] = 2048,
    user: UserOpt = None,
) -> None:
    """Index text files (folders recursively; binaries, hidden folders and files over
    --max-kb skipped). Run again after changes: only changed files are read again, and
    facts citing what changed are flagged, never cut off from their source."""
    from hermes.providers.evidence import index_paths

    provider = _provider(user)
    with progress_bar("indexing") as advance:
        report = index_paths(
            provider.store, provider.user_id, paths, max_bytes=max_kb * 1024, progress=advance
        )
    note(
        f"{report.files} files: {report.indexed} indexed, {report.unchanged} unchanged, "
        f"{report.skipped} skipped, {report.vanished} gone (marked stale); chunks: "
        f"{report.inserted} new, {report.staled} stale (still cited), {report.deleted} removed"
    )
    for path, why in report.skipped_files[:20]:
        note(f"  skipped {escape(path)}: {escape(why)}")
    if len(report.skipped_files) > 20:
        note(f"  … and {len(report.skipped_files) - 20} more skipped")


@app.command()
def search(
    query: str,
    limit: Annotated[int, typer.Option(min=1, max=50)] = 5,
    user: UserOpt = None,
    as_json: AsJson = False,
) -> None:
    """The best chunks for QUERY, and the verified facts that cite them."""
    provider = _provider(user)
    chunks, facts = provider.search(query, limit)
    if as_json:
        print_json({"chunks": chunks, "facts": facts})
        return
    if not chunks:
        note(f"[dim]nothing found in {provider.store.where}[/dim]")
    for fact in facts:
        cites = ", ".join(fact.chunk_ids)
        note(f"[green]fact #{fact.id}[/green] {escape(fact.text)} (cites {cites})")
    for chunk in chunks:
        where = f"{chunk.locator}:{chunk.line_start}-{chunk.line_end}"
        note(f"[bold]{chunk.id}[/bold] {escape(where)}\n  {escape(chunk.text[:300])}")


@app.command()
def facts(
    status: Annotated[
        str | None,
        typer.Option(
            "--status", help=f"{FACT_STATUSES.words}.", autocompletion=FACT_STATUSES.complete
        ),
    ] = None,
    user: UserOpt = None,
    as_json: AsJson = False,
) -> None:
    """The facts, with their status, flag (a cited source changed) and citations."""
    if status is not None and status not in FACT_STATUSES:
        fail(f"--status must be {FACT_STATUSES.words}", EXIT_USAGE)
    provider = _provider(user)
    rows = provider.store.facts(provider.user_id, status=status)
    if as_json:
        print_json(rows)
        return
    table = new_table("id", "status", "flagged", "fact", "cites")
    for row in rows:
        table.add_row(
            str(row.id), row.status, "yes" if row.flagged else "", row.text, " ".join(row.chunk_ids)
        )
    print_table(table)


@app.command()
def review(
    fact_id: int,
    status: Annotated[
        str, typer.Argument(help=f"{FACT_STATUSES.words}.", autocompletion=FACT_STATUSES.complete)
    ],
    user: UserOpt = None,
) -> None:
    """Review a fact: only verified facts are recalled into conversations."""
    from hermes.state.evidence import EvidenceError

    provider = _provider(user)
    try:
        done = provider.store.review_fact(provider.user_id, fact_id, status)
    except EvidenceError as exc:
        fail(str(exc), EXIT_USAGE)
    if not done:
        fail(f"no fact #{fact_id} for this user", EXIT_REFUSED)
    note(f"fact #{fact_id} is now {status}")


@app.command()
def verify(
    user: UserOpt = None,
    all_users: Annotated[bool, typer.Option("--all")] = False,
    as_json: AsJson = False,
) -> None:
    """Counts of sources, chunks, facts and artifacts, stale sources, flagged facts, and
    orphans (a fact or artifact citing no live chunk): exits 1 if there is any orphan."""
    provider = _provider(user)
    counts = provider.store.verify(None if all_users else provider.user_id)
    if as_json:
        print_json(counts)
    else:
        table = new_table("what", "count")
        for key, value in counts.items():
            table.add_row(key.replace("_", " "), str(value))
        print_table(table)
    if counts["orphan_facts"] or counts["orphan_artifacts"]:
        raise typer.Exit(EXIT_REFUSED)


@app.command()
def pack(
    name: str,
    query: Annotated[str | None, typer.Argument(help="Build it from this (else read it).")] = None,
    user: UserOpt = None,
    as_json: AsJson = False,
) -> None:
    """Build a named context pack (the verified facts and chunks for QUERY), or read one
    back as it was built."""
    provider = _provider(user)
    result = provider.context_pack(name, query)
    if not result["success"]:
        fail(str(result["error"]), EXIT_REFUSED)
    if as_json:
        print_json(result)
        return
    note(f"[bold]{escape(name)}[/bold]: {escape(str(result['query']))}")
    for fact in result["facts"]:
        flag = " [yellow](flagged)[/yellow]" if fact["flagged"] else ""
        cites = ", ".join(str(c) for c in fact["cites"])
        note(f"  fact {fact['fact_id']} ({fact['status']}{flag}): {escape(fact['text'])} [{cites}]")
    for chunk in result["chunks"]:
        stale = " [yellow](stale)[/yellow]" if chunk["stale"] else ""
        note(f"  chunk {chunk['chunk_id']} {escape(chunk['where'])}{stale}")
        note(f"    [dim]{escape(chunk['text'][:200])}[/dim]")
    if not result["facts"] and not result["chunks"]:
        note("  [dim](nothing found)[/dim]")


__all__ = ["app"]
