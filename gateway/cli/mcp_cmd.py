"""`hermes mcp list|add|remove|test`: the MCP servers the owner plugs in (config.yaml's
`mcp.servers`; who may use each one's tools: `hermes tools`, group mcp:NAME)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, new_table, print_json, print_table, say

app = typer.Typer(help="MCP servers whose tools the assistant may use.", no_args_is_help=True)

Name = Annotated[str, typer.Argument(help="The server's name (lowercase, digits, - and _).")]


@app.command("list")
def list_(as_json: AsJson = False) -> None:
    """Each server: how it runs, which tools, and who may use it."""
    from hermes.tools import capabilities as caps

    ctx = CliContext.load(reading=True)
    rows: list[tuple[str, str, str, str, list[str]]] = []
    for name, server in ctx.config.mcp.servers.items():
        how = server.url or " ".join([server.command or "", *server.args])
        who = caps.who_may(f"mcp:{name}", ctx.config.tools)
        tools = "all" if not server.include else ", ".join(server.include)
        if server.exclude:
            tools += f" but {', '.join(server.exclude)}"
        rows.append((name, "http" if server.url else "stdio", how, tools, list(who)))
    if as_json:
        print_json(
            [
                {"name": n, "transport": t, "runs": h, "tools": tl, "who": w}
                for n, t, h, tl, w in rows
            ]
        )
        return
    if not rows:
        say("No MCP servers (hermes mcp add NAME --command ... or --url ...).")
        return
    table = new_table("name", "transport", "runs", "tools", "who may use it")
    for row in rows:
        name, transport, how, tools, allowed = row
        table.add_row(
            Text(name), transport, Text(how), Text(tools), Text(", ".join(allowed) or "nobody")
        )
    print_table(table)


@app.command()
def add(
    name: Name,
    command: Annotated[str | None, typer.Option(help="The program to run (stdio).")] = None,
    arg: Annotated[
        list[str] | None, typer.Option("--arg", help="One of its arguments (repeatable).")
    ] = None,
    cwd: Annotated[str | None, typer.Option(help="The folder it runs in (stdio).")] = None,
    url: Annotated[str | None, typer.Option(help="A streamable HTTP server's address.")] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            "--env",
            help="THEIR_VAR=OUR_VAR: the server's variable, taken from ours (repeatable; "
            "secrets stay in the environment, never in config.yaml).",
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", help="Header-Name=OUR_VAR: an HTTP header from our variable."),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds a call may take.")] = 60.0,
) -> None:
    """Add (or replace) a server; only the owner may use it until `hermes tools allow`."""
    from gateway.config import ConfigError, update_config

    ctx = CliContext.load()
    server: dict[str, object] = {"timeout": timeout}
    if command:
        server.update(command=command, args=list(arg or []))
        if cwd:
            server["cwd"] = cwd
    if url:
        server["url"] = url
    try:
        server["env"] = _pairs(env or [], "--env")
        server["headers"] = _pairs(header or [], "--header")
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        path = update_config(ctx.home, {("mcp", "servers", name): server})
    except ConfigError as exc:
        fail(str(exc), EXIT_REFUSED)
    say(
        f"MCP server {name} saved in {path}; the owner may use it "
        f"(others: hermes tools allow mcp:{name} ...)"
    )


@app.command()
def remove(name: Name) -> None:
    """Remove a server (and who may use it)."""
    from gateway.config import REMOVE, ConfigError, update_config

    ctx = CliContext.load()
    if name not in ctx.config.mcp.servers:
        fail(f"no MCP server {name!r} (see hermes mcp list)", EXIT_REFUSED)
    try:
        update_config(
            ctx.home, {("mcp", "servers", name): REMOVE, ("tools", f"mcp:{name}"): REMOVE}
        )
    except ConfigError as exc:
        fail(str(exc), EXIT_REFUSED)
    say(f"MCP server {name} removed.")


@app.command()
def test(name: Name) -> None:
    """Start the server as the gateway would, list its tools, and stop it."""
    import asyncio

    from gateway.config import mcp_servers
    from hermes import extras

    ctx = CliContext.load(reading=True)
    if (missing := extras.needs("mcp", "MCP servers")) is not None:
        fail(missing, EXIT_REFUSED)
    if name not in ctx.config.mcp.servers:
        fail(f"no MCP server {name!r} (see hermes mcp list)", EXIT_REFUSED)
    launches, problems = mcp_servers(ctx.config)
    if name in problems:
        fail(f"{name} cannot start: {problems[name]}", EXIT_REFUSED)

    async def probe() -> tuple[list[str], str]:
        from hermes.tools.mcp import McpHub

        hub = McpHub({name: launches[name]}, {})
        try:
            tools = await hub.tools(name)
            return [f"{t.offered}  ({t.name})" for t in tools], hub.states()[name]
        finally:
            await hub.close()

    tools, state = asyncio.run(probe())
    if not state.startswith("running"):
        fail(f"{name}: {state}", EXIT_REFUSED)
    say(f"{name}: {state}")
    for line in tools:
        say(f"  {line}")


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"{flag} {item!r}: expected NAME=OUR_VARIABLE")
        pairs[key] = value
    return pairs
