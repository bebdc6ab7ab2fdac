"""`hermes tools list|allow|deny|reset|check`: who may use which of the assistant's tools
(config.yaml's `tools:` section; the one decision is hermes/tools/capabilities.py)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, new_table, print_json, print_table, say
from hermes.tools import capabilities as caps

app = typer.Typer(
    help="Who may use which tools (roles and people, per tool group).", no_args_is_help=True
)

Group = Annotated[str, typer.Argument(help="A tool group: memory, schedule, mcp:NAME, …")]
Who = Annotated[
    list[str],
    typer.Argument(
        help="Roles (user, admin, owner: that role and above) or people (u_… or PLATFORM:ID)."
    ),
]


def _groups(ctx: CliContext) -> list[str]:
    from hermes import extras

    named = [g for g in ctx.config.tools if g.startswith(caps.MCP_PREFIX)]
    found = caps.groups(
        provider=bool(ctx.config.memory.provider),
        web=not extras.missing("web"),
        mcp_servers=list(ctx.config.mcp.servers),
    )
    return found + [g for g in named if g not in found]


@app.command("list")
def list_(as_json: AsJson = False) -> None:
    """Each tool group, who may use it, and whether that is the default."""
    ctx = CliContext.load(reading=True)
    rows = [
        (g, list(caps.who_may(g, ctx.config.tools)), g not in ctx.config.tools)
        for g in _groups(ctx)
    ]
    if as_json:
        print_json([{"group": g, "who": who, "default": default} for g, who, default in rows])
        return
    table = new_table("group", "who may use it", "", "what it lets me do")
    for group, who, default in rows:
        table.add_row(  # Text: "mcp:notes:" is no emoji code
            Text(group),
            Text(", ".join(who) or "nobody"),
            "default" if default else "config.yaml",
            Text(caps.summary(group)),
        )
    print_table(table)


def _checked(group: str, who: list[str]) -> tuple[str, list[str]]:
    try:
        return caps.check_group(group), [caps.check_entry(w) for w in who]
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)


def _write(ctx: CliContext, group: str, who: list[str] | object) -> None:
    from gateway.config import ConfigError, update_config

    try:
        path = update_config(ctx.home, {("tools", group): who})
    except ConfigError as exc:
        fail(str(exc), EXIT_REFUSED)
    now = caps.who_may(group, CliContext.load().config.tools)
    say(f"{group}: {caps.describe(now)} ({path}; a running gateway reads it at restart)")


@app.command()
def allow(group: Group, who: Who) -> None:
    """Let these roles or people use a tool group (added to who may already)."""
    ctx = CliContext.load()
    group, entries = _checked(group, who)
    current = list(caps.who_may(group, ctx.config.tools))
    _write(ctx, group, caps.simplest([*current, *entries]))


@app.command()
def deny(group: Group, who: Who) -> None:
    """Take these roles or people off a tool group's list (`deny GROUP user admin owner`
    with nobody named left turns the group off)."""
    ctx = CliContext.load()
    group, entries = _checked(group, who)
    current = list(caps.who_may(group, ctx.config.tools))
    missing = [e for e in entries if e not in current]
    if missing:
        fail(
            f"{', '.join(missing)} not on the list of {group} ({', '.join(current) or 'nobody'}); "
            "a role covers every higher one: take the lower role off and allow the ones "
            "to keep",
            EXIT_REFUSED,
        )
    _write(ctx, group, [e for e in current if e not in entries])


@app.command()
def reset(group: Group) -> None:
    """Give a tool group its default again (config.yaml stops naming it)."""
    from gateway.config import REMOVE

    ctx = CliContext.load()
    group, _ = _checked(group, [])
    _write(ctx, group, REMOVE)


@app.command()
def check(
    person: Annotated[str, typer.Argument(help="u_… or PLATFORM:ID")], as_json: AsJson = False
) -> None:
    """Which tool groups a person may use, and why not where they may not."""
    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    user_id = db.people.resolve(person)
    if user_id is None:
        fail(f"no user {person!r} (see hermes users list)", EXIT_REFUSED)
    holder = caps.holder_of(db.people, user_id, ctx.home)
    verdicts = [(g, caps.may_use(holder, g, ctx.config.tools)) for g in _groups(ctx)]
    if as_json:
        print_json([{"group": g, "allowed": why is None, "why_not": why} for g, why in verdicts])
        return
    table = new_table("group", f"{user_id} ({holder.role})", "why not")
    for group, why in verdicts:
        table.add_row(Text(group), "yes" if why is None else "no", Text(why or ""))
    print_table(table)
