"""`hermes memory providers|setup|off`: the memory provider beside the built-in memory
(commands of `hermes memory`, kept apart from the stores' own)."""

from __future__ import annotations

import re
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

    from gateway.config import ConfigError, provider_settings, update_config
    from hermes.providers import registry

    ctx = CliContext.load()
    interactive = sys.stdin.isatty()
    name = name or _choose(sorted(registry.discover(ctx.home)), interactive)
    if recall_mode is not None and recall_mode not in RECALL_MODES:
        fail(f"--recall-mode must be {RECALL_MODES.words}", EXIT_USAGE)
    try:
        fields = registry.config_schema(name, ctx.home)
    except registry.ProviderError as exc:
        fail(str(exc), EXIT_USAGE)
    stored = _settings(name, fields, _pairs(values or []), interactive)
    settings = provider_settings(fields, stored)
    probe = registry.load(name, settings, ctx.home)()
    missing = []
    if not probe.is_available():  # what it lacks, as these settings see it
        missing = [
            f"{f.key}: set the environment variable {stored.get(f'{f.key}_env') or f.env_var}"
            for f in fields
            if f.secret and f.required and not settings.get(f.key)
        ]
        missing.append(probe.unavailable_reason())
    changes: dict[tuple[str, ...], object] = {
        ("memory", "provider"): name,
        ("memory", "providers", name): stored,
    }
    if recall_mode is not None:
        changes[("memory", "recall_mode")] = recall_mode
    try:
        probe.save_config(settings, ctx.home)
        path = update_config(ctx.home, changes)
    except ConfigError as exc:
        fail(str(exc), EXIT_REFUSED)
    note(f"memory provider {name} selected in {path}")
    for item in missing:
        note(f"[yellow]still missing:[/yellow] {escape(item)}")
    if missing:
        raise typer.Exit(EXIT_REFUSED)


def _choose(names: list[str], interactive: bool) -> str:
    if not names:
        fail("no memory provider is installed: see `hermes memory providers`", EXIT_REFUSED)
    if not interactive:
        fail(f"name the provider: one of {', '.join(names)}", EXIT_USAGE)
    return str(typer.prompt(f"Provider ({', '.join(names)})"))


def _settings(
    name: str, fields: list[ConfigField], given: dict[str, str], interactive: bool
) -> dict[str, object]:
    """What config.yaml will hold for the provider: each field from --set, else asked on
    a terminal, else its default; a secret as `<key>_env: VARIABLE`."""
    known = {f.key for f in fields} | {f"{f.key}_env" for f in fields if f.secret}
    if set(given) - known:
        fail(f"{name} has no setting {', '.join(sorted(set(given) - known))}", EXIT_USAGE)
    stored: dict[str, object] = {}
    for field in fields:
        key = f"{field.key}_env" if field.secret else field.key
        value: object = given.get(key, given.get(field.key))
        if value is None and interactive:
            question = field.description + (" (name of the env variable)" if field.secret else "")
            default = field.env_var if field.secret else field.default
            value = typer.prompt(question, default=default if default is not None else "")
        if value in (None, "") and field.required and not field.secret:
            fail(f"{name} needs {field.key} ({field.description}): --set {field.key}=…", EXIT_USAGE)
        if field.secret and value not in (None, "") and not _ENV_NAME.fullmatch(str(value)):
            fail(
                f"{key} takes the NAME of an environment variable, not the secret itself "
                f"(config.yaml never holds secrets): put the value in the environment "
                f"(e.g. {field.env_var or 'PROVIDER_API_KEY'}=… in the service's env file) "
                f"and pass --set {key}={field.env_var or 'PROVIDER_API_KEY'}",
                EXIT_USAGE,
            )
        if not field.secret and (problem := field.problem(value)):
            fail(problem, EXIT_USAGE)
        if value not in (None, ""):
            stored[key] = value
    return stored


@app.command()
def off() -> None:
    """Back to the built-in memory only (the provider's settings are kept)."""
    from gateway.config import ConfigError, update_config

    ctx = CliContext.load()
    try:
        path = update_config(ctx.home, {("memory", "provider"): ""})
    except ConfigError as exc:
        fail(str(exc), EXIT_REFUSED)
    note(f"built-in memory only ({path}); restart the gateway to apply it")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _pairs(items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--set takes KEY=VALUE, got {item!r}", EXIT_USAGE)
        pairs[key.strip()] = value.strip()
    return pairs
