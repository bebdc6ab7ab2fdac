"""Entry point of the `hermes` console command."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import typer

from gateway.cli import (
    backup_cmd,
    chat_cmd,
    dashboard_cmd,
    db_cmd,
    doctor_cmd,
    evidence_cmd,
    gateway_cmd,
    init_cmd,
    mcp_cmd,
    memory_cmd,
    provider_cmd,
    reminders_cmd,
    sessions_cmd,
    tools_cmd,
    usage_cmd,
    users_cmd,
)

app = typer.Typer(
    name="hermes",
    help=(
        "Hermes: a self-hosted assistant that remembers you across Telegram, Discord, "
        "Slack and the terminal."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion, --show-completion bash|zsh|fish
)


def _version(value: bool) -> None:
    if value:
        from importlib import metadata  # about 50 ms: only for --version

        try:
            version = metadata.version("hermes-gateway")
        except metadata.PackageNotFoundError:  # run from a checkout without installing
            version = "unknown (not installed)"
        commit = _commit()
        typer.echo(f"hermes {version}" + (f" (commit {commit})" if commit else ""))
        raise typer.Exit


def _commit() -> str | None:
    """The commit a checkout runs (`make`'s editable install): its short hash and date,
    `+changes` when files differ from it; None for an install without its git folder."""
    import subprocess

    from hermes.extras import checkout

    source = checkout()
    if source is None or not (source / ".git").exists():
        return None
    git = ["git", "-C", str(source)]
    try:
        head = subprocess.run(
            [*git, "log", "-1", "--format=%h, %cs"],
            capture_output=True, text=True, timeout=5, check=False,
        )  # fmt: skip
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0 or not head.stdout.strip():
        return None
    return head.stdout.strip() + (", +changes" if dirty.stdout.strip() else "")


@app.callback()
def _root(
    _show: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    as_owner_of_home: Annotated[
        bool,
        typer.Option(
            "--as-owner-of-home",
            help="Run even though HERMES_HOME belongs to another user (files it writes "
            "will be yours, not the service's).",
        ),
    ] = False,
) -> None:
    """Hermes: a self-hosted assistant that remembers you."""
    if as_owner_of_home:
        from gateway.cli.context import allow_foreign_home

        allow_foreign_home()


memory_cmd.app.add_typer(provider_cmd.app)  # providers, setup, off: memory commands too
app.add_typer(memory_cmd.app, name="memory")
app.add_typer(sessions_cmd.app, name="sessions")
app.add_typer(gateway_cmd.gateway_app, name="gateway")
app.add_typer(gateway_cmd.scheduler_app, name="scheduler")
app.add_typer(users_cmd.users_app, name="users")
app.add_typer(users_cmd.pairing_app, name="pairing")
app.add_typer(backup_cmd.app, name="backup")
app.add_typer(db_cmd.app, name="db")
app.add_typer(reminders_cmd.app, name="reminders")
app.add_typer(tools_cmd.app, name="tools")
app.add_typer(mcp_cmd.app, name="mcp")
app.add_typer(evidence_cmd.app, name="evidence")
app.add_typer(dashboard_cmd.app, name="dashboard")
app.command("chat")(chat_cmd.chat)
app.command("init")(init_cmd.init)
app.command("doctor")(doctor_cmd.doctor)
app.command("usage")(usage_cmd.usage)


def _plain_help(command: Any, parent: typer.Context | None = None) -> None:
    """How the help names parameters: a flag takes no value, so none is shown after it
    (the help option's own included); an argument, and an option's value, by its name in
    capitals (`--model MODEL`, not the type's `<str>` or `<list[str]>`, whose width also
    squeezed the help text into a column cut short); a choice keeps its choices."""
    ctx = typer.Context(command, info_name=command.name, parent=parent)
    for param in command.get_params(ctx):
        if param.metavar is not None or not param.name:
            continue
        if getattr(param, "is_flag", False):
            param.metavar = ""
        elif param.param_type_name == "argument" or not _is_choice(param):
            param.metavar = param.name.upper()
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub, ctx)


def _is_choice(param: Any) -> bool:
    """An option whose values are an enum's (its help lists them: `<memory|user>`)."""
    from enum import Enum

    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    return isinstance(annotation, type) and issubclass(annotation, Enum)


def main() -> None:
    # Commands report their own outcomes; a library warning about the same event (a
    # rejected consolidation, say) would say it twice. `hermes gateway run` sets up
    # logging for its journal itself.
    logging.getLogger().setLevel(logging.ERROR)
    command = typer.main.get_command(app)
    _plain_help(command)
    try:
        command()
    except Exception as exc:  # damage or a full disk met mid-command: as at open
        from gateway.cli.context import EXIT_USAGE, CliContext, fail
        from hermes.state.db import STATE_DB_FILENAME
        from hermes.state.engine import explain, is_damage, is_storage_failure
        from hermes.state.retry import StateDBError

        if isinstance(exc, StateDBError):
            message = str(exc)
        elif is_damage(exc) or is_storage_failure(exc):
            message = explain(CliContext.home_only() / STATE_DB_FILENAME, exc)
        else:
            raise
        try:
            fail(message, EXIT_USAGE)
        except typer.Exit as done:  # outside the command: exit here, with no traceback
            raise SystemExit(done.exit_code) from None
