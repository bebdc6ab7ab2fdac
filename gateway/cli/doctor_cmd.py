"""`hermes doctor`: a table of checks, each ✗ with its fix; exit 1 when one fails."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from gateway.cli.context import EXIT_REFUSED, CliContext
from gateway.cli.output import AsJson, new_table, note, print_json, print_table

MARKS = {"ok": "[green]✓[/green]", "fail": "[red]✗[/red]", "skip": "[dim]–[/dim]"}


def doctor(
    as_json: AsJson = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Seconds for each network check.")
    ] = 10.0,
) -> None:
    """Check the config, HERMES_HOME, state.db, the model, each platform and the scheduler."""
    import asyncio

    from gateway.ops.doctor import run_checks

    home = CliContext.home_only()
    checks = asyncio.run(run_checks(home, timeout=timeout))
    failed = [check for check in checks if check.status == "fail"]
    if as_json:
        print_json({"home": str(home), "ok": not failed, "checks": checks})
    else:
        table = new_table("", "check", "result", "fix", title=f"Hermes doctor: {home}")
        for check in checks:
            table.add_row(MARKS[check.status], check.name, escape(check.detail), escape(check.fix))
        print_table(table)
        verdict = f"[red]{len(failed)} problem(s)[/red]" if failed else "[green]all good[/green]"
        note(verdict)
    if failed:
        raise typer.Exit(EXIT_REFUSED)


__all__ = ["doctor"]
