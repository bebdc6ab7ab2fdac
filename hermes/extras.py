"""The optional features' extras (`[project.optional-dependencies]` in pyproject.toml): is
one installed here, and the one line that installs it into this very environment.

Every feature that needs an extra (a platform's SDK, PostgreSQL's driver, a memory
service's client) asks here before it is used, so an install without it hears one
sentence naming the extra instead of a ModuleNotFoundError from deep inside.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import sys
from pathlib import Path

DISTRIBUTION = "hermes-gateway"
CONSTRAINTS = Path("requirements") / "constraints.txt"


@functools.cache
def _requirements() -> tuple[str, ...]:
    try:
        return tuple(importlib.metadata.requires(DISTRIBUTION) or ())
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return ()


def missing(extra: str) -> list[str]:
    """The distributions of `extra` that are not installed here ([]: all are)."""
    absent = []
    for requirement in _requirements():
        if not re.search(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", requirement):
            continue
        name = re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0]
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            absent.append(name)
    return absent


def checkout() -> Path | None:
    """The source checkout this install runs from (an editable install, `make`), if any."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def install_command(extra: str) -> str:
    """The command that adds `extra` to the environment running this process, at the
    versions the constraints file pins."""
    pip = Path(sys.prefix) / "bin" / "pip"
    source = checkout()
    if source is not None:
        return f"{pip} install -c {source / CONSTRAINTS} -e '{source}[{extra}]'"
    return (
        f"{pip} install -c CHECKOUT/{CONSTRAINTS} 'CHECKOUT[{extra}]' (CHECKOUT: where "
        "hermes was cloned, /opt/hermes/src on a server; deploy/README.md step 1)"
    )


def needs(extra: str, what: str) -> str | None:
    """None when `extra` is installed; else the sentence saying `what` needs it and how
    to install it."""
    absent = missing(extra)
    if not absent:
        return None
    return (
        f"{what} needs the '{extra}' extra, which is not installed here "
        f"({', '.join(absent)} missing): {install_command(extra)}"
    )
