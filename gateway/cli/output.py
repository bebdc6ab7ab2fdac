"""The CLI's output layer: the only place that writes to the terminal."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta
from enum import Enum
from typing import Annotated, Any

import typer
from rich.console import Console

# `--json` on list and status commands: the same rows as the table, for scripts
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    # Plain print of the exact JSON, so scripts can parse it (rich would re-wrap it).
    text = json.dumps(data, ensure_ascii=False, default=_plain)
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _plain(value: Any) -> Any:
    """Dates as ISO 8601, durations in seconds, enums by value, dataclasses as objects."""
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
    console.print(text, markup=False)


def note(markup: str) -> None:
    console.print(markup)
