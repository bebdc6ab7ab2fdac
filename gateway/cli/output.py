"""The CLI's output layer: the only place that writes to the terminal."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    # Plain print of the exact JSON, so scripts can parse it (rich would re-wrap it).
    console.print(json.dumps(data, ensure_ascii=False), markup=False, highlight=False)


def say(text: str) -> None:
    console.print(text, markup=False)


def note(markup: str) -> None:
    console.print(markup)
