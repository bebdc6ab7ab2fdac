"""`hermes memory providers|setup|off`: the memory provider beside the built-in memory
(commands of `hermes memory`, kept apart from the stores' own)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gateway.cli.complete import RECALL_MODES, provider_names
from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, new_table, note, print_json, print_table

if TYPE_CHECKING:
    from hermes.providers.base import ConfigField

app = typer.Typer()  # its commands join `hermes memory` (gateway/cli/main.py)


SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="KEY=VALUE for a provider setting (repeatable)."),
]


@app.command()
def providers(as_json: AsJson = False) -> None:
    """Every memory provider Hermes can find, what it needs, and whether it can run."""
    from gateway.config import provider_settings
    from hermes.providers import registry

    ctx = CliContext.load(reading=True)
    rows = []
    for found in registry.discover(ctx.home).values():
        available, reason, needs = False, found.error, ""
        if found.make is not None:
            try:
                # checked with what config.yaml sets for it (its key from the environment)
                raw = ctx.config.memory.providers.get(found.name, {})
                fields = list(found.make({}).get_config_schema())
                probe = found.make(provider_settings(fields, raw))
                available, reason = probe.is_available(), probe.unavailable_reason()
                needs = ", ".join(getattr(probe, "needs", ())) or "nothing (local)"
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
        rows.append(
            {
                "name": found.name,
                "origin": found.origin,
                "needs": needs,
                "installed": found.make is not None,
                "available": available,
                "reason": reason,
                "selected": found.name == ctx.config.memory.provider,
            }
        )
    if as_json:
        print_json(rows)
        return
    if not rows:
        note(
            f"No memory provider is installed (built-in memory only). Plugins go in "
            f"{ctx.home / 'plugins'}/<name>/, or install a package with a "
            f"'{registry.ENTRY_POINT_GROUP}' entry point."
        )
        return
    table = new_table("provider", "from", "needs", "available", "selected")
    for row in rows:
        state = "yes" if row["available"] else f"no: {escape(str(row['reason']))}"
        table.add_row(
            str(row["name"]),
            str(row["origin"]),
            str(row["needs"]),
            state,
            "yes" if row["selected"] else "",
        )
    print_table(table)


@app.command()
def setup(
    name: Annotated[
        str | None,
        typer.Argument(help="The provider (asked when omitted).", autocompletion=provider_names),
    ] = None,
    values: SetOpt = None,
    recall_mode: Annotated[
        str | None,
        typer.Option(
            "--recall-mode", help=f"{RECALL_MODES.words}.", autocompletion=RECALL_MODES.complete
        ),
    ] = None,
) -> None:
    """Choose the memory provider and its settings (asked on a terminal, or given with
    --set KEY=VALUE); a secret is given as the NAME of the environment variable that
    holds it, never its value. Checks that the provider can run, then writes config.yaml."""
    import sys

    from gateway.config import ConfigError
    from gateway.config_edit import SettingError, apply_provider, plan_provider
    from hermes.providers import registry

    ctx = CliContext.load()
    interactive = sys.stdin.isatty()
    name = name or _choose(sorted(registry.discover(ctx.home)), interactive)
    if recall_mode is not None and recall_mode not in RECALL_MODES:
        fail(f"--recall-mode must be {RECALL_MODES.words}", EXIT_USAGE)
    try:
        plan = plan_provider(
            ctx.home, name, _pairs(values or []), recall_mode, _ask if interactive else None
        )
    except SettingError as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        path = apply_provider(ctx.home, plan)
    except ConfigError as exc:
        fail(str(exc), EXIT_REFUSED)
    note(f"memory provider {name} selected in {path}")
    for item in plan.missing:
        note(f"[yellow]still missing:[/yellow] {escape(item)}")
    if plan.missing:
        raise typer.Exit(EXIT_REFUSED)


def _ask(field: ConfigField) -> object:
    """A setting not given, asked on the terminal."""
    question = field.description + (" (name of the env variable)" if field.secret else "")
    default = field.env_var if field.secret else field.default
    return typer.prompt(question, default=default if default is not None else "")


def _choose(names: list[str], interactive: bool) -> str:
    if not names:
        fail("no memory provider is installed: see `hermes memory providers`", EXIT_REFUSED)
    if not interactive:
        fail(f"name the provider: one of {', '.join(names)}", EXIT_USAGE)
    return str(typer.prompt(f"Provider ({', '.join(names)})"))


@app.command()
def off() -> None:
    """Back to the built-in memory only (the provider's settings are kept)."""
    from gateway.config import ConfigError
    from gateway.config_edit import built_in_only

    ctx = CliContext.load()
    try:
        path = built_in_only(ctx.home)
    except ConfigError as exc:
        fail(str(exc), EXIT_REFUSED)
    note(f"built-in memory only ({path}); restart the gateway to apply it")


def _pairs(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--set takes KEY=VALUE, got {item!r}", EXIT_USAGE)
        pairs[key.strip()] = value.strip()
    return pairs
