"""`hermes gateway ...` and `hermes scheduler ...`."""

from __future__ import annotations

import asyncio
import logging

import typer
from rich.table import Table

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import console, note
from gateway.config import ConfigError
from gateway.http_server import HttpServerError
from gateway.runtime import Gateway
from gateway.scheduler import read_status

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
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except HttpServerError as exc:
        fail(str(exc), EXIT_REFUSED)
    finally:
        db.close()
    note("gateway stopped")


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
