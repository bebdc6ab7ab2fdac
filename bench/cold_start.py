"""Cold start: CPU seconds a `hermes` command costs from exec to exit.

    .venv/bin/python bench/cold_start.py [--runs 7] [--json]

Each command runs as a fresh process (the installed `hermes` script, bytecode already
cached, as on a server after the first run; PYTHONDONTWRITEBYTECODE is unset for them)
in a throwaway HERMES_HOME with a config. The figure is user + system CPU of the child:
the minimum and the median over the runs (the minimum is the least disturbed by other
load on a shared machine). `python -c pass`, `import sqlmodel` and `import openai` are
measured beside them: the floor of any process, of any command that opens state.db, and
of any that calls a model (`hermes memory add` does: the memory guard's judge checks the
entry; this home's model is a closed port, so the entry is held as pending).

Aims: `--help` under 0.3 s; a command that opens state.db at most 1.0 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HELP_AIM_SECONDS = 0.3
STATE_AIM_SECONDS = 1.0
BIN = Path(sys.executable).parent

COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import sqlmodel'": [sys.executable, "-c", "import sqlmodel"],
    "python -c 'import openai'": [sys.executable, "-c", "import openai"],
    "hermes --help": [str(BIN / "hermes"), "--help"],
    "hermes --version": [str(BIN / "hermes"), "--version"],
    "hermes memory status": [str(BIN / "hermes"), "memory", "status"],
    "hermes memory add": [str(BIN / "hermes"), "memory", "add", "Prefers tea in the morning"],
    "hermes sessions list": [str(BIN / "hermes"), "sessions", "list"],
    "hermes gateway --help": [str(BIN / "hermes"), "gateway", "--help"],
}


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    """User + system CPU of one child process (`resource` counts only reaped children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        env = {**os.environ, "HERMES_HOME": str(home)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a server: bytecode cached once
        subprocess.run(
            [str(BIN / "hermes"), "init", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"],
            env=env,
            stdout=subprocess.DEVNULL,
            check=True,
        )
        figures: dict[str, dict[str, float]] = {}
        for name, argv in COMMANDS.items():
            cpu_seconds(argv, env)  # warm the bytecode cache and the page cache
            runs = [cpu_seconds(argv, env) for _ in range(args.runs)]
            figures[name] = {"min_s": min(runs), "median_s": statistics.median(runs)}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(
        f"CPU seconds per command, {args.runs} runs each (aims: --help under "
        f"{HELP_AIM_SECONDS} s, commands that open state.db at most {STATE_AIM_SECONDS} s)"
    )
    for name, figure in figures.items():
        print(f"  {name:32} min {figure['min_s']:.3f}  median {figure['median_s']:.3f}")


if __name__ == "__main__":
    main()
