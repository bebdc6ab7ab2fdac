"""`hermes db migrate --to postgresql://…`: move this home's state.db to PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, new_table, note, print_json, print_table, progress_bar

if TYPE_CHECKING:
    from gateway.config import DatabaseConfig
    from hermes.config import MemoryConfig
    from hermes.state.copy import TableCheck
    from hermes.state.db import SessionDB

app = typer.Typer(
    help="Where state.db lives: move it to a PostgreSQL server.", no_args_is_help=True
)


@app.command()
def migrate(
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="The empty PostgreSQL database: postgresql://USER@HOST:5432/DATABASE",
        ),
    ],
    password_env: Annotated[
        str | None,
        typer.Option("--password-env", help="The environment variable that holds its password."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would move; change nothing.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Copy state.db into an empty PostgreSQL database, verify every table (rows and
    checksums), and print the config change that switches this home to it."""
    from pydantic import ValidationError

    from gateway.config import ConfigError, DatabaseConfig, HermesConfig, database_url
    from gateway.instance import AlreadyRunningError, InstanceLock
    from hermes.state.db import STATE_DB_FILENAME
    from hermes.state.engine import StateDBError, redact

    ctx = CliContext.load(reading=True)
    if ctx.config.database.url is not None:
        fail(f"this home already uses {redact(ctx.config.database.url)}", EXIT_USAGE)
    path = ctx.home / STATE_DB_FILENAME
    if not path.exists():
        fail(f"{path} does not exist: nothing to migrate", EXIT_USAGE)
    try:
        section = DatabaseConfig(url=to, password_env=password_env)
        url = database_url(HermesConfig(database=section))
    except (ValidationError, ConfigError) as exc:
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        fail(f"--to: {reason}", EXIT_USAGE)
    assert url is not None
    lock = InstanceLock(ctx.home)
    try:
        lock.acquire()  # nobody may write state.db while it is copied
    except AlreadyRunningError as exc:
        fail(f"{exc} (the copy must be of a state.db nobody writes)", EXIT_REFUSED)
    try:
        copied = _copy(path, url, dry_run, as_json, ctx.config.memory)
    except StateDBError as exc:
        fail(str(exc), EXIT_REFUSED)
    finally:
        lock.release()
    if copied is not None:
        _report(*copied, redact(to), section, as_json)


def _copy_memory(
    home: Path, config: MemoryConfig, source: SessionDB, target: SessionDB
) -> list[TableCheck]:
    """Every person's memory files into the database's stores, byte for byte: one
    check per store (its characters as rows, its text as the checksum). A file that
    cannot be read is a check that fails (the operator fixes it and migrates again)."""
    from hermes.memory.store import Target
    from hermes.memory.sweep import users_with_memory
    from hermes.memory.user_memory import UserMemory
    from hermes.state.copy import TableCheck
    from hermes.state.memory_stores import StoredText

    files = config.model_copy(update={"backend": "files"})
    checks = []
    for user_id in users_with_memory(home, files, source):
        memory = UserMemory(home, user_id, files)
        for kind in Target:
            state = memory.file_store(kind).read()
            name = f"memories/{user_id}/{kind.filename}"
            if state.damage and not state.entries:  # not UTF-8: nothing can be copied
                checks.append(TableCheck(name, 1, 0, "unreadable", ""))
                continue
            if not state.raw and not state.pending_raw:
                continue
            target.memory_stores.swap(StoredText(user_id, kind.value), state.raw, state.pending_raw)
            copied = target.memory_stores.read(user_id, kind.value)
            size = len(state.raw) + len(state.pending_raw)
            checks.append(
                TableCheck(
                    name,
                    size,
                    len(copied.text) + len(copied.pending),
                    _digest(state.raw, state.pending_raw),
                    _digest(copied.text, copied.pending),
                )
            )
    return checks


def _digest(text: str, pending: str) -> str:
    import hashlib

    return hashlib.sha256(f"{text}\x00{pending}".encode()).hexdigest()


def _copy(
    path: Path, url: str, dry_run: bool, as_json: bool, config: MemoryConfig
) -> tuple[list[TableCheck], list[str]] | None:
    """Copy, index and verify, all or nothing: the checks and the media files that were
    already gone (None: a dry run, reported here). A copy that fails part way, or whose
    checks differ, is emptied out of the database again, so trying again needs nothing."""
    from hermes.state import copy, postgres
    from hermes.state.db import SessionDB
    from hermes.state.engine import redact

    source = SessionDB(path)
    try:
        counts = copy.row_counts(source.engine)
        if not postgres.untouched(url):  # a dry run asks the server too
            fail(
                f"{redact(url)} already holds tables: migrate into an empty database "
                "(nothing was changed)",
                EXIT_REFUSED,
            )
        if dry_run:
            _report_plan(counts, as_json)
            return None
        postgres.clear(url)  # what a command run against it wrote: nothing of anyone's
        try:
            with copy.explained():
                checks, missing = _copy_into(path, url, source, config, counts)
        except copy.CopyError as exc:
            _clear(url)
            fail(f"{exc}. Nothing was kept in the database, state.db is as it was", EXIT_REFUSED)
        except BaseException:  # Ctrl-C, or what the caller reports (StateDBError)
            _clear(url)
            raise
        if any(not check.ok for check in checks):
            _clear(url)
        return checks, missing
    finally:
        source.close()


def _clear(url: str) -> None:
    """The database emptied again, if it can be reached (the failure said why if not)."""
    import contextlib

    from hermes.state import postgres

    with contextlib.suppress(Exception):
        postgres.clear(url)


def _copy_into(
    path: Path, url: str, source: SessionDB, config: MemoryConfig, counts: dict[str, int]
) -> tuple[list[TableCheck], list[str]]:
    from hermes.state import copy, postgres
    from hermes.state.db import SessionDB

    target = SessionDB(path, url=url)
    try:
        with progress_bar("copying") as advance:
            total, done = sum(counts.values()), [0]

            def moved(_table: str, rows: int, of: int) -> None:
                advance(done[0] + rows, total)
                if rows == of:
                    done[0] += rows

            copy.copy_all(source.engine, target.engine, moved)
            postgres.index_backlog(target.engine)
            _, missing = copy.copy_media_files(path.parent, target.engine)
            tables = copy.verify(source.engine, target.engine)
            stores = _copy_memory(path.parent, config, source, target)
            providers = copy.copy_provider_stores(path.parent, target.engine)
        return tables + stores + providers, missing
    finally:
        target.close()


def _report_plan(counts: dict[str, int], as_json: bool) -> None:
    if as_json:
        print_json({"dry_run": True, "tables": counts})
        return
    table = new_table("table", "rows", title="would move")
    for name, rows in counts.items():
        table.add_row(name, f"{rows:,}")
    print_table(table)
    note(_STAYS)


_STAYS = (
    "the memory files (memories/), the local memory providers' stores (holographic.db, "
    "evidence.db) and the files people sent (media/) move into the database and may be "
    "removed once the gateway runs on it"
)


def _report(
    rows: list[TableCheck],
    missing: list[str],
    where: str,
    section: DatabaseConfig,
    as_json: bool,
) -> None:
    bad = [c for c in rows if not c.ok]
    if as_json:
        print_json({"ok": not bad, "tables": rows, "database": where, "media_missing": missing})
    else:
        if missing:
            note(
                f"[yellow]{len(missing)} file(s) named by state.db were no longer in the "
                f"home[/yellow] (e.g. {escape(missing[0])}): their rows moved, their bytes "
                "were already gone"
            )
        table = new_table("table", "rows", "checksum", title=f"copied to {escape(where)}")
        for check in rows:
            mark = "[green]same[/green]" if check.ok else "[red]DIFFERS[/red]"
            table.add_row(check.table, f"{check.source_rows:,} -> {check.target_rows:,}", mark)
        print_table(table)
    if bad:
        fail(
            f"{len(bad)} table(s) differ after the copy ({bad[0].table}): keep using state.db "
            "(the database was emptied again; migrating again starts afresh)",
            EXIT_REFUSED,
        )
    if not as_json:
        lines = [f"  url: {section.url}"]
        if section.password_env:
            lines.append(f"  password_env: {section.password_env}")
        note(
            "[green]✓[/green] every table verified. To switch, add to config.yaml and "
            "restart the gateway:\n\ndatabase:\n" + "\n".join(lines) + f"\n\n{_STAYS}"
        )


__all__ = ["app"]
