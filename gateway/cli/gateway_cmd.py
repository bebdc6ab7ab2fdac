"""`hermes gateway ...` and `hermes scheduler ...`."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.markup import escape

from gateway.cli.complete import JOBS, LOG_LEVELS
from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, new_table, note, print_json, print_table
from gateway.instances import Gateways, gateways

gateway_app = typer.Typer(help="Run the gateway process.", no_args_is_help=True)
scheduler_app = typer.Typer(help="Background jobs.", no_args_is_help=True)


@gateway_app.command("run")
def run(
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            help=f"{LOG_LEVELS.words} (default: config).",
            autocompletion=LOG_LEVELS.complete,
        ),
    ] = None,
) -> None:
    """Run the gateway in the foreground until SIGTERM/SIGINT (systemd runs this)."""
    import asyncio

    from gateway import logs
    from gateway.config import ConfigError
    from gateway.edge.http_server import HttpServerError
    from gateway.instance import AlreadyRunningError, InstanceLock
    from gateway.runtime import Gateway
    from hermes.state.engine import StateDBError

    ctx = CliContext.load()
    if log_level is not None and log_level.lower() not in LOG_LEVELS:
        fail(f"--log-level: {log_level!r} is not {LOG_LEVELS.words}", EXIT_USAGE)
    logs.configure(ctx.config, log_level)
    # from here on every line is a log record, in the configured format (a json log
    # holds nothing else): the process's own words included, on stderr like the rest
    logger = logging.getLogger("gateway")

    def fatal(message: str, code: int) -> NoReturn:
        logger.critical("%s", message)
        raise typer.Exit(code)

    # one gateway per home on SQLite; on PostgreSQL several share the database (and
    # may share a home): the database coordinates them (gateway/cluster.py)
    instance = InstanceLock(ctx.home) if ctx.config.database.url is None else None
    try:
        if instance is not None:
            instance.acquire()
    except AlreadyRunningError as exc:
        fatal(str(exc), EXIT_REFUSED)
    db = ctx.open_db(patience=ctx.config.database.startup_wait_seconds)
    logs.STORED.attach(db)  # warnings and errors kept for the dashboard (those so far too)
    code = 0
    try:
        gateway = Gateway(ctx.home, ctx.config, db)
        platforms = ", ".join(gateway.platforms) or "no platforms enabled"
        logger.info("Hermes gateway starting (%s); SIGTERM or Ctrl-C stops it", platforms)
        code = asyncio.run(gateway.serve())
    except (ConfigError, StateDBError) as exc:
        fatal(str(exc), EXIT_USAGE)
    except HttpServerError as exc:
        fatal(str(exc), EXIT_REFUSED)
    finally:
        logs.STORED.detach()
        db.close()
        if instance is not None:
            instance.release()
    logger.info("gateway stopped")
    if code:
        raise typer.Exit(code)


@gateway_app.command("status")
def gateway_status(as_json: AsJson = False) -> None:
    """Whether a gateway is running for this HERMES_HOME, its platforms and uptime (with
    a PostgreSQL database: every gateway instance on it)."""
    ctx = CliContext.load(reading=True)
    home = ctx.home
    if ctx.config.database.url is not None:
        db = ctx.open_db()
        try:
            found = gateways(home, ctx.config, db)
        finally:
            db.close()
    else:
        found = gateways(home, ctx.config, None)
    if as_json:  # one shape on both backends: every instance known, `alive` for each
        print_json(
            {
                "home": str(home),
                "backend": found.backend,
                "running": bool(found.alive),
                "instances": [i.as_json() for i in found.instances],
                "inbox": found.inbox,
            }
        )
    elif found.backend == "postgresql":
        _print_instances(found)
    else:
        _print_one(home, found)
    raise typer.Exit(0 if found.alive else EXIT_REFUSED)


def _print_one(home: Path, found: Gateways) -> None:
    if found.stale is not None:
        stale = found.stale
        note(
            f"[yellow]No gateway is running for {home}[/yellow] (the last one, pid "
            f"{stale.pid}, started {stale.started_at:%Y-%m-%d %H:%M} UTC, did not stop cleanly)."
        )
        return
    if not found.alive:
        note(f"No gateway is running for {home}.")
        return
    one = found.alive[0]
    uptime = datetime.now(UTC) - one.started_at
    note(
        f"[green]Gateway running[/green] for {home}: pid {one.pid}, up "
        f"{str(uptime).split('.')[0]} (since {one.started_at:%Y-%m-%d %H:%M} UTC), "
        f"http {one.http}"
    )
    for name, state in one.platforms.items():
        colour = "green" if state == "connected" else "red"
        note(f"  {name}: [{colour}]{escape(state)}[/{colour}]")
    if not one.platforms:
        note("  no platforms enabled")


def _print_instances(found: Gateways) -> None:
    """Every gateway instance on the database: host, pid, uptime, heartbeat, platforms,
    the leases it holds (sessions being worked, the leader, a platform's connection)."""
    if not found.alive:
        note(f"No gateway is running on this database ({len(found.instances)} stopped lately).")
        return
    now = datetime.now(UTC)
    note(
        f"[green]Gateway running[/green]: {len(found.alive)} instance(s); "
        f"{found.inbox} event(s) queued"
    )
    for one in found.instances:
        beat = (now - one.heartbeat_at).total_seconds() if one.heartbeat_at else 0.0
        if not one.alive:  # what it last said, never shown as up or connected now
            ended = "stopped" if one.stopped_at is not None else "no heartbeat: died"
            last = one.last_platforms
            note(
                f"  {escape(one.id)} [red]gone[/red] ({ended}; last heartbeat {beat:.0f} s "
                f"ago): host {escape(one.host)}, pid {one.pid}"
                + (f"; last seen: {escape(_listed(last))}" if last else "")
            )
            continue
        up = str(now - one.started_at).split(".")[0]
        note(
            f"  {escape(one.id)} [green]alive[/green]: host {escape(one.host)}, pid "
            f"{one.pid}, up {up}, heartbeat {beat:.0f} s ago, http "
            f"{escape(str(one.http or '?'))}, sessions leased {one.sessions_leased}"
            + (f", holds {', '.join(one.holds)}" if one.holds else "")
        )
        for name, platform_state in one.platforms.items():
            colour = "green" if platform_state == "connected" else "yellow"
            note(f"    {name}: [{colour}]{escape(str(platform_state))}[/{colour}]")


def _listed(platforms: dict[str, str]) -> str:
    return ", ".join(f"{name} {state}" for name, state in platforms.items())


@scheduler_app.command("status")
def status(as_json: AsJson = False) -> None:
    """Jobs with their interval, next run and last result."""
    from gateway.scheduler import read_status

    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    if as_json:
        print_json(read_status(ctx.home, ctx.config, db))
        return
    table = new_table("job", "every", "next run (UTC)", "last run (UTC)", "last result")
    for job in read_status(ctx.home, ctx.config, db):
        next_run = (
            f"{job.next_run:%Y-%m-%d %H:%M:%S}"
            if job.next_run
            else "not scheduled (no gateway is running)"
        )
        last = f"{job.last_run:%Y-%m-%d %H:%M:%S}" if job.last_run else "-"
        result = (
            "-"
            if job.last_ok is None
            else ("ok: " if job.last_ok else "failed: ") + job.last_result
        )
        if job.paused_at is not None:
            next_run = f"paused since {job.paused_at:%Y-%m-%d %H:%M}"
        elif job.run_asked_at is not None:
            next_run = f"asked to run at {job.run_asked_at:%H:%M:%S}"
        table.add_row(job.id, str(job.every), next_run, last, result)
    print_table(table)


JobName = Annotated[
    str, typer.Argument(help=f"The job: {JOBS.words}.", autocompletion=JOBS.complete)
]


@scheduler_app.command("run")
def run_job(job: JobName) -> None:
    """Run a job now, whatever its schedule (the gateway whose turn it is starts it within
    seconds; with none running, at the next start)."""
    _control(job, "run")


@scheduler_app.command("pause")
def pause_job(job: JobName) -> None:
    """Pause a job: its runs are skipped, on every gateway, until `hermes scheduler resume`."""
    _control(job, "pause")


@scheduler_app.command("resume")
def resume_job(job: JobName) -> None:
    """Let a paused job run on its schedule again."""
    _control(job, "resume")


def _control(job: str, what: str) -> None:
    from gateway.scheduler import control
    from hermes.identity import owner_user_id

    ctx = CliContext.load()
    db = ctx.open_db()
    try:
        said = control(db, ctx.config, job, what, owner_user_id(ctx.home))
    except ValueError as exc:
        fail(f"{exc}.", EXIT_USAGE)
    note(said + ".")


@scheduler_app.command("history")
def history(
    job: Annotated[
        str,
        typer.Argument(help="One job's runs (default: every job's).", autocompletion=JOBS.complete),
    ] = "",
    count: Annotated[int, typer.Option("--count", "-n", min=1, max=500, help="How many.")] = 20,
    as_json: AsJson = False,
) -> None:
    """The newest runs of the jobs: when, how long, where, who asked, the result."""
    from gateway.scheduler import job_specs

    ctx = CliContext.load(reading=True)
    ids = [spec.id for spec in job_specs(ctx.config)]
    if job and job not in ids:
        fail(f"there is no job {job!r} (jobs: {', '.join(ids)}).", EXIT_USAGE)
    runs = ctx.open_db().jobs.history(job, limit=count)
    if as_json:
        print_json([run.model_dump() for run in runs])
        return
    if not runs:
        note("No run recorded yet" + (f" for {job}." if job else "."))
        return
    table = new_table("job", "started (UTC)", "took", "where", "asked by", "result")
    for run in runs:
        result = ("ok: " if run.ok else "failed: ") + run.summary
        took = f"{run.seconds:.1f} s"
        started = f"{run.started_at:%Y-%m-%d %H:%M:%S}"
        table.add_row(run.job_id, started, took, run.instance, run.asked_by or "-", escape(result))
    print_table(table)
