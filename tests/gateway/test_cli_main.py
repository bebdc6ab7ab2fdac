"""The `hermes` command itself."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from tests.harness.cli import hermes


def test_version_and_bare_help() -> None:
    shown = hermes("--version")
    assert shown.returncode == 0 and shown.stdout.startswith(
        f"hermes {metadata.version('hermes-gateway')} (commit "
    )  # this checkout's commit: two commits are told apart
    head = subprocess.run(
        ["git", "log", "-1", "--format=%h"], capture_output=True, text=True, check=True,
        cwd=Path(__file__).parents[2],
    ).stdout.strip()  # fmt: skip
    assert f"(commit {head}, " in shown.stdout
    bare = hermes()
    assert "Usage" in bare.stdout + bare.stderr and "memory" in bare.stdout + bare.stderr


# What a command must not import: the model SDK, the platform SDKs, the scheduler (about
# 2 s of CPU between them). bench/cold_start.py measures the time; this checks the cause.
HEAVY = ("openai", "telegram", "discord", "slack_bolt", "apscheduler", "aiohttp")
PROBE = """
import sys
from gateway.cli.main import main
sys.argv = ["hermes", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print("LOADED", sorted(name for name in {heavy!r} if name in sys.modules), file=sys.stderr)
"""


def loaded_by(home: Path, *args: str) -> list[str]:
    probe = PROBE.format(heavy=(*HEAVY, "sqlmodel"))
    done = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, HERMES_HOME=str(home)),
        timeout=60,
        check=False,
    )
    line = next(row for row in done.stderr.splitlines() if row.startswith("LOADED"))
    return list(ast.literal_eval(line.removeprefix("LOADED ")))


def test_commands_import_only_what_they_use(home: Path) -> None:
    assert loaded_by(home, "--help") == []  # not even state.db
    assert loaded_by(home, "memory", "--help") == []
    assert loaded_by(home, "memory", "add", "Prefers tea") == ["sqlmodel"]
    assert loaded_by(home, "memory", "status") == ["sqlmodel"]
    assert "apscheduler" in loaded_by(home, "scheduler", "status")  # it reads the job specs


def test_shell_completion_is_offered_and_completes_commands(home: Path) -> None:
    script = subprocess.run(
        [*HERMES_BIN, "--show-completion"],
        capture_output=True,
        text=True,
        env=dict(os.environ, HERMES_HOME=str(home)),
        timeout=60,
        check=False,
    )
    assert script.returncode == 0 and "_HERMES_COMPLETE" in script.stdout
    for shell, words, cword, expected in (
        ("complete_bash", "hermes mem", "1", "memory"),
        ("complete_bash", "hermes memory st", "2", "status"),
        ("complete_zsh", "hermes sess", "1", "sessions"),
        # values of options and arguments: fixed sets, and the providers of this home
        ("complete_bash", "hermes sessions export u_1 --format ", "5", "jsonl"),
        ("complete_bash", "hermes gateway run --log-level w", "4", "warning"),
        ("complete_bash", "hermes init --platform d", "3", "discord"),
        ("complete_bash", "hermes init --mode sl", "3", "slack=http"),
        ("complete_bash", "hermes memory setup hol", "3", "holographic"),
        ("complete_bash", "hermes memory setup --recall-mode h", "4", "hybrid"),
        ("complete_bash", "hermes users role u_1 ad", "4", "admin"),
    ):
        done = subprocess.run(
            HERMES_BIN,
            capture_output=True,
            text=True,
            env=dict(
                os.environ,
                HERMES_HOME=str(home),
                _HERMES_COMPLETE=shell,
                COMP_WORDS=words,
                COMP_CWORD=cword,
            ),
            timeout=60,
            check=False,
        )
        assert expected in done.stdout, (shell, words, done.stdout, done.stderr)


HERMES_BIN = [str(Path(sys.executable).parent / "hermes")]


def test_help_names_parameters_plainly_and_loses_no_words() -> None:
    """A flag shows no value type (its --help too), an argument its name in capitals, and
    help text in square brackets (which the renderer reads as markup) never vanishes."""
    from tests.harness.cli import hermes

    top = hermes("--help").stdout
    assert "<bool>" not in top and "--version" in top
    why = hermes("memory", "why", "--help").stdout
    assert "TEXT" in why and "{text}" not in why and "<bool>" not in why
    init = hermes("init", "--help").stdout
    assert "https://api.openai.com/v1" in init and "gpt-4o-mini" in init
    # an option's value by its name, not its type (`<list[str]>` took the help's width)
    assert "<str>" not in init and "<list[str]>" not in init and "<int" not in init
    assert "BASE_URL" in init and "PLATFORM" in init
    add = hermes("memory", "add", "--help").stdout
    assert "<memory|user>" in add  # a choice keeps its choices


def test_the_clis_value_sets_are_copies_of_their_homes(home: Path) -> None:
    """complete.py keeps the sets the CLI names (so --help loads no pydantic); each must
    equal what the config models, the registry and the people repository define."""
    from typing import get_args

    from gateway.cli import complete
    from gateway.config import LoggingConfig, load_config
    from gateway.edge.platform_config import platforms
    from gateway.scheduler import EVERY_INSTANCE, job_specs
    from hermes.config import MemoryConfig
    from hermes.state.evidence import FACT_STATUSES
    from hermes.state.people import ROLES

    def literal(model: Any, field: str) -> tuple[str, ...]:
        return tuple(get_args(model.model_fields[field].annotation))

    assert complete.SURFACES.values == tuple(platforms())
    configured = tuple(name for name, p in platforms().items() if p.setup is not None)
    assert complete.PLATFORMS.values == configured
    for platform in platforms().values():  # init's modes are its config model's
        if platform.setup is not None and platform.setup.modes:
            assert platform.setup.modes == literal(platform.config, "mode")
    assert complete.RECALL_MODES.values == literal(MemoryConfig, "recall_mode")
    assert complete.LOG_FORMATS.values == literal(LoggingConfig, "format")
    assert complete.LOG_LEVELS.values == literal(LoggingConfig, "level")
    assert complete.ROLES.values == ROLES
    specs = job_specs(load_config(home))
    assert complete.JOBS.values == tuple(s.id for s in specs if s.id not in EVERY_INSTANCE)
    assert complete.FACT_STATUSES.values == FACT_STATUSES
