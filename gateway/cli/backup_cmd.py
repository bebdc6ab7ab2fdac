"""`hermes backup create [PATH]` and `hermes backup restore PATH [--force]`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, note, print_json, progress_bar

app = typer.Typer(
    help="One verifiable archive of state.db, the memories and the config.", no_args_is_help=True
)


@app.command()
def create(
    path: Annotated[
        Path | None,
        typer.Argument(help="Archive to write (default: HERMES_HOME/backups/...tar.gz)."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Back up this HERMES_HOME (safe while the gateway runs; never the secrets)."""
    from gateway.ops import backup

    home = CliContext.home_only()
    if not home.exists():
        fail(f"{home} does not exist: nothing to back up (is HERMES_HOME right?)", EXIT_USAGE)
    try:
        database = _database(home)
        extra = _provider_files(home)
        with progress_bar("backing up") as advance:
            summary = backup.create(home, path, advance, extra, database=database)
    except backup.BackupError as exc:
        fail(str(exc), EXIT_REFUSED)
    if as_json:
        print_json({"path": summary.path, "files": summary.files, "bytes": summary.bytes})
        return
    size = f"{summary.bytes / 2**20:.1f} MiB"
    note(f"[green]✓[/green] {summary.files} files ({size}) from {home} -> {summary.path}")


@app.command()
def restore(
    path: Annotated[Path, typer.Argument(help="An archive from `hermes backup create`.")],
    force: Annotated[
        bool, typer.Option("--force", help="Replace the data this home holds (saved first).")
    ] = False,
    with_plugins: Annotated[
        bool,
        typer.Option(
            "--with-plugins",
            help="Also restore plugin code (plugins/), which runs when Hermes loads it.",
        ),
    ] = False,
) -> None:
    """Verify an archive, then restore it into this HERMES_HOME (the gateway stopped)."""
    from gateway.instance import AlreadyRunningError, InstanceLock
    from gateway.ops import backup

    home = CliContext.home_only()
    if not path.is_file():
        fail(f"{path}: no such file", EXIT_USAGE)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = InstanceLock(home)
    try:
        lock.acquire()  # no gateway may run on this home while its files are replaced
    except AlreadyRunningError as exc:
        fail(str(exc), EXIT_REFUSED)
    try:
        database = _database(home)
        with progress_bar("restoring") as advance:
            summary = backup.restore(
                path, home, force, advance, with_plugins=with_plugins, database=database
            )
    except backup.BackupError as exc:
        fail(str(exc), EXIT_REFUSED)
    finally:
        lock.release()
    if summary.replaced_backup:
        note(f"the data it replaced is saved in {escape(str(summary.replaced_backup))}")
    note(
        f"[green]✓[/green] restored {summary.files} files from {escape(str(path))} "
        f"(made {summary.created_at}) into {home}"
    )
    if summary.skipped_plugins:
        note(
            f"[yellow]plugin code was not restored[/yellow] ({len(summary.skipped_plugins)} "
            "files under plugins/): it would run inside Hermes; restore it with "
            "--with-plugins only if you trust the archive"
        )
    for restored, origin in summary.external.items():
        note(f"the memory provider's file {escape(origin)} is restored as {escape(restored)}")


def _database(home: Path) -> str | None:
    """The home's PostgreSQL URL with its password (None: state.db is the SQLite file)."""
    from gateway.config import ConfigError, database_url, load_config

    try:
        return database_url(load_config(home))
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)


def _provider_files(home: Path) -> list[Path]:
    """The memory provider's files outside HERMES_HOME (its `backup_paths`)."""
    from gateway.app import provider_factory
    from gateway.config import ConfigError, load_config

    try:
        factory = provider_factory(home, load_config(home))
        return list(factory().backup_paths()) if factory is not None else []
    except ConfigError as exc:
        note(f"[yellow]the memory provider's own files are not included:[/yellow] {exc}")
    except Exception as exc:  # the provider's own code failed
        note(f"[yellow]the memory provider's files are not included:[/yellow] {type(exc).__name__}")
    return []


__all__ = ["app"]
