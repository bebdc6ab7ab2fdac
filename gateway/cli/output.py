"""The CLI's output layer: the only place that writes to the terminal."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from enum import Enum
from pathlib import PurePath
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

# `--json` on list and status commands: the same rows as the table, for scripts
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    # Plain print of the exact JSON, so scripts can parse it (rich would re-wrap it).
    text = json.dumps(data, ensure_ascii=False, default=_plain)
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _plain(value: Any) -> Any:
    """Dates as ISO 8601, durations in seconds, enums by value, dataclasses as objects,
    paths as text."""
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def say(text: str) -> None:
    console.print(text, markup=False, emoji=False)  # "mcp:notes:" is no emoji code


def note(markup: str) -> None:
    console.print(markup)


@contextlib.contextmanager
def progress_bar(what: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr for long operations (hidden when stderr is not a
    terminal): yields `advance(done, total)`."""
    from rich.progress import Progress  # a few dozen ms: only when something is long

    with Progress(console=err_console, transient=True) as progress:
        task = progress.add_task(what, total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield advance


def new_table(*columns: str, title: str | None = None) -> Table:
    """A table whose cells fold instead of being cut: an id is never truncated."""
    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def print_table(table: Table) -> None:
    """The table on a terminal; piped, plain tab-separated rows under a header line, for
    `cut` and `awk` (what --json gives in full)."""
    if console.is_terminal:
        console.print(table)
        return
    rows = [[str(column.header) for column in table.columns]]
    rows += [
        list(row) for row in zip(*(map(_plain_cell, c.cells) for c in table.columns), strict=True)
    ]
    for row in rows:  # written as is: rich's print would expand the tabs into spaces
        console.file.write("\t".join(cell.replace("\t", " ") for cell in row) + "\n")


def _plain_cell(cell: object) -> str:
    text = Text.from_markup(cell) if isinstance(cell, str) else cell
    return text.plain if isinstance(text, Text) else str(text)


def hermes_command() -> str:
    """How this person runs Hermes again: `hermes` when that name on PATH is this
    program, else the path it was started by (after `make chat`: .venv/bin/hermes)."""
    started = sys.argv[0] if sys.argv else ""
    if os.path.basename(started) != "hermes":
        return "hermes"  # started some other way (python -m, a test): the usual name
    found = shutil.which("hermes")
    with contextlib.suppress(OSError):
        if found and os.path.samefile(found, started):
            return "hermes"
    return started
