"""`hermes dashboard`: the web dashboard for a home with no gateway running, and
`hermes dashboard passwd`: an owner's or admin's dashboard password."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import note

if TYPE_CHECKING:
    from gateway.config import HermesConfig

app = typer.Typer(
    help="The web dashboard (the gateway serves it too, under /admin/).",
    invoke_without_command=True,
)


@app.callback()
def serve(
    ctx: typer.Context,
    port: Annotated[
        int | None, typer.Option(help="Listen here instead of gateway.http.port.", min=0)
    ] = None,
) -> None:
    """Serve the dashboard until Ctrl-C (with no gateway running for this home)."""
    if ctx.invoked_subcommand is not None:
        return
    import asyncio

    from gateway import logs
    from gateway.app import build_embedder
    from gateway.config import dashboard_address, dashboard_refusal
    from gateway.dashboard.auth import CredentialsError
    from gateway.dashboard.pages import Dashboard, Parts
    from gateway.edge.http_server import HttpServer, HttpServerError
    from gateway.status_file import read_status_file

    cli = CliContext.load()
    config = cli.config if port is None else _with_port(cli.config, port)
    if (refusal := dashboard_refusal(config)) is not None:
        fail(f"the dashboard is not served: {refusal}", EXIT_REFUSED)
    running = read_status_file(cli.home)
    if running is not None and running.running and port is None:
        note(
            f"The gateway (pid {running.pid}) serves it: {dashboard_address(config, running.http)}"
        )
        return
    logs.configure(config)
    db = cli.open_db()
    people = cli.people(db)
    parts = Parts(cli.home, config, db, people, people.memory, build_embedder(config, db))
    try:
        dashboard = Dashboard(parts, config.gateway.http.port)
    except CredentialsError as exc:
        fail(str(exc), EXIT_REFUSED)
    server = HttpServer(config.gateway.http.host, config.gateway.http.port, dict)
    for route in dashboard.routes():
        server.add(route)

    async def run() -> None:
        await server.start()
        dashboard.site.set_port(server.port)
        listening = f"{server.host}:{server.port}"
        note(f"Dashboard: {dashboard_address(config, listening)} (Ctrl-C stops it)")
        sys.stdout.flush()
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    try:
        asyncio.run(run())
    except HttpServerError as exc:
        fail(str(exc), EXIT_REFUSED)
    except KeyboardInterrupt:
        pass
    finally:
        db.close()


def _with_port(config: HermesConfig, port: int) -> HermesConfig:
    http = config.gateway.http.model_copy(update={"port": port})
    return config.model_copy(update={"gateway": config.gateway.model_copy(update={"http": http})})


@app.command()
def passwd(
    user: Annotated[
        str | None,
        typer.Option("--user", help="An owner or admin (u_… or PLATFORM:ID; default: the owner)."),
    ] = None,
    from_stdin: Annotated[
        bool, typer.Option("--stdin", help="Read the password from standard input.")
    ] = False,
) -> None:
    """Set the dashboard password of an owner or admin (stored as a scrypt hash, 0600)."""
    from gateway.dashboard.auth import Credentials, CredentialsError, password_problem

    cli = CliContext.load()
    db = cli.open_db()
    user_id = cli.user_id(user)
    found = db.people.get_user(user_id)
    if found is None or found.role not in ("owner", "admin"):
        fail(f"{user_id} is not an owner or admin (hermes users role ... admin)", EXIT_REFUSED)
    if from_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    if (problem := password_problem(password)) is not None:
        fail(problem, EXIT_USAGE)
    try:
        Credentials.load(cli.home).set_password(user_id, password)
    except CredentialsError as exc:
        fail(str(exc), EXIT_REFUSED)
    note(f"[green]✓[/green] dashboard password set for {user_id}")
