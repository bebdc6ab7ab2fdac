"""`hermes gateway ...` and `hermes scheduler ...`."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import typer
from rich.markup import escape
from rich.table import Table

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import console, note
from gateway.config import ConfigError
from gateway.http_server import HttpServerError
from gateway.runtime import Gateway
from gateway.scheduler import read_status
from gateway.status_file import read_status_file
from hermes.state.engine import StateDBError

gateway_app = typer.Typer(help="Run the gateway process.", no_args_is_help=True)
scheduler_app = typer.Typer(help="Background jobs.", no_args_is_help=True)


@gateway_app.command("run")
def run() -> None:
    """Run the gateway in the foreground until SIGTERM/SIGINT (systemd runs this)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    ctx = CliContext.load()
    db = ctx.open_db()
    try:
        gateway = Gateway(ctx.home, ctx.config, db)
        platforms = ", ".join(gateway.platforms) or "no platforms enabled"
        note(f"[bold]Hermes gateway[/bold] starting ({platforms}). Ctrl-C or SIGTERM stops it.")
        asyncio.run(gateway.serve())
    except (ConfigError, StateDBError) as exc:
        fail(str(exc), EXIT_USAGE)
    except HttpServerError as exc:
        fail(str(exc), EXIT_REFUSED)
    finally:
        db.close()
    note("gateway stopped")


@gateway_app.command("status")
def gateway_status() -> None:
    """Whether a gateway is running for this HERMES_HOME, its platforms and uptime."""
    home = CliContext.home_only()
    found = read_status_file(home)
    if found is None:
        note(f"No gateway is running for {home}.")
        raise typer.Exit(EXIT_REFUSED)
    if not found.running:
        note(
            f"[yellow]No gateway is running for {home}[/yellow] (the last one, pid "
            f"{found.pid}, started {found.started_at:%Y-%m-%d %H:%M} UTC, did not stop cleanly)."
        )
        raise typer.Exit(EXIT_REFUSED)
    uptime = datetime.now(UTC) - found.started_at
    note(
        f"[green]Gateway running[/green] for {home}: pid {found.pid}, up "
        f"{str(uptime).split('.')[0]} (since {found.started_at:%Y-%m-%d %H:%M} UTC), "
        f"http {found.http}"
    )
    for name, state in found.platforms.items():
        colour = "green" if state == "connected" else "red"
        note(f"  {name}: [{colour}]{escape(state)}[/{colour}]")
    if not found.platforms:
        note("  no platforms enabled")


@scheduler_app.command("status")
def status() -> None:
    """Jobs with their interval, next run and last result."""
    ctx = CliContext.load()
    db = ctx.open_db()
    table = Table()
    for column in ("job", "every", "next run (UTC)", "last run (UTC)", "last result"):
        table.add_column(column)
    for job in read_status(ctx.home, ctx.config, db):
        next_run = (
            f"{job.next_run:%Y-%m-%d %H:%M:%S}"
            if job.next_run
            else "not scheduled (no gateway has run)"
        )
        last = f"{job.last_run:%Y-%m-%d %H:%M:%S}" if job.last_run else "-"
        result = (
            "-"
            if job.last_ok is None
            else ("ok: " if job.last_ok else "failed: ") + job.last_result
        )
        table.add_row(job.id, str(job.every), next_run, last, result)
    console.print(table)
