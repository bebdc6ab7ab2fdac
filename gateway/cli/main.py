"""Entry point of the `hermes` console command."""

from __future__ import annotations

import typer

from gateway.cli import memory_cmd, sessions_cmd

app = typer.Typer(
    name="hermes",
    help=(
        "Hermes: a self-hosted assistant that remembers you across Telegram, Discord, "
        "Slack and the terminal."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(memory_cmd.app, name="memory")
app.add_typer(sessions_cmd.app, name="sessions")


def main() -> None:
    app()
