"""`hermes users ...` and `hermes pairing ...`: people, roles and access from the shell."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gateway.cli.complete import PLATFORMS, ROLES
from gateway.cli.context import (
    CLI_PLATFORM,
    CLI_USER,
    EXIT_REFUSED,
    EXIT_USAGE,
    CliContext,
    fail,
    known_platform,
)
from gateway.cli.output import AsJson, new_table, note, print_json, print_table
from hermes.identity import owner_user_id

if TYPE_CHECKING:
    from hermes.state.db import SessionDB

users_app = typer.Typer(help="People: list, link, roles and blocks.", no_args_is_help=True)
pairing_app = typer.Typer(help="Access requests from strangers' DMs.", no_args_is_help=True)
UserArg = Annotated[str, typer.Argument(help="A user id (u_…) or PLATFORM:ID.")]


def _resolve(db: SessionDB, who: str, ctx: CliContext, create: bool = False) -> str:
    """The user of `who`; with `create`, an account not seen yet (PLATFORM:ID) becomes a
    user now, so a role can be given before the person first writes."""
    if ":" in who and not who.startswith("u_"):
        known_platform(who)
    user_id = db.people.resolve(who)
    if user_id is None and create and ":" in who and not who.startswith("u_"):
        platform, _, ident = who.strip().partition(":")
        if ident.strip():
            return db.people.user_for_identity(platform.lower(), ident.strip())
    if user_id is None:
        fail(
            f"no user {who!r} in {ctx.home}: give a user id (u_…) or PLATFORM:ID "
            "(see hermes users list)",
            EXIT_REFUSED,
        )
    return user_id


@users_app.command("list")
def list_(as_json: AsJson = False) -> None:
    """Everyone known, with their linked accounts and activity."""
    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    if as_json:
        print_json(
            [
                {
                    "user_id": s.user.id,
                    "name": s.user.display_name,
                    "role": s.user.role,
                    "status": s.user.status,
                    "accounts": [f"{i.platform}:{i.platform_user_id}" for i in s.identities],
                    "sessions": s.sessions,
                    "last_active": s.last_active,
                }
                for s in db.people.users()
            ]
        )
        return
    table = new_table("user", "name", "role", "status", "accounts", "sessions", "last active")
    for summary in db.people.users():
        user = summary.user
        table.add_row(
            user.id,
            escape(user.display_name),
            user.role,
            user.status,
            escape(", ".join(f"{i.platform}:{i.platform_user_id}" for i in summary.identities)),
            str(summary.sessions),
            f"{summary.last_active:%Y-%m-%d %H:%M}" if summary.last_active else "-",
        )
    print_table(table)


@users_app.command()
def show(who: UserArg, as_json: AsJson = False) -> None:
    """One user: role, accounts and sessions."""
    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    user_id = _resolve(db, who, ctx)
    summary = next(s for s in db.people.users() if s.user.id == user_id)
    user = summary.user
    if as_json:
        print_json(
            {
                "id": user.id,
                "display_name": user.display_name,
                "role": user.role,
                "status": user.status,
                "sessions": summary.sessions,
                "accounts": [
                    {
                        "platform": i.platform,
                        "id": i.platform_user_id,
                        "display_name": i.display_name,
                        "last_seen": i.last_seen,
                    }
                    for i in summary.identities
                ],
            }
        )
        return
    note(f"[bold]{user.id}[/bold] {escape(user.display_name)} · {user.role} · {user.status}")
    for identity in summary.identities:
        note(
            f"  {identity.platform}:{escape(identity.platform_user_id)} "
            f"({escape(identity.display_name)}), last seen {identity.last_seen:%Y-%m-%d %H:%M}"
        )
    note(f"  {summary.sessions} sessions; `hermes memory status --user {user.id}` for memory")


@users_app.command()
def link(code: Annotated[str, typer.Argument(help="The code /link gave in a chat.")]) -> None:
    """Link the chat account that asked for CODE with you (the owner on this machine)."""
    ctx = CliContext.load()
    db = ctx.open_db()
    outcome = ctx.people(db).link(
        code, requester=f"{CLI_PLATFORM}:{CLI_USER}", current_user=owner_user_id(ctx.home)
    )
    if not outcome.ok:
        fail(outcome.message, EXIT_REFUSED)
    note(f"[green]✓[/green] {escape(outcome.message)}")


@users_app.command()
def unlink(
    who: UserArg,
    platform: Annotated[
        str, typer.Argument(help=f"{PLATFORMS.words}.", autocompletion=PLATFORMS.complete)
    ],
) -> None:
    """Detach a user's account on PLATFORM: it becomes a separate person again."""
    ctx = CliContext.load()
    db = ctx.open_db()
    ok, message = ctx.people(db).unlink(_resolve(db, who, ctx), platform.lower())
    if not ok:
        fail(message, EXIT_REFUSED)
    note(f"[green]✓[/green] {escape(message)}")


@users_app.command()
def role(
    who: UserArg,
    new_role: Annotated[
        str, typer.Argument(metavar="ROLE", help=f"{ROLES.words}.", autocompletion=ROLES.complete)
    ],
) -> None:
    """Set a user's role (admins may use /admin commands in chat)."""
    if new_role not in ROLES:
        fail(f"unknown role {new_role!r}: expected {ROLES.words}", EXIT_USAGE)
    ctx = CliContext.load()
    db = ctx.open_db()
    user_id = _resolve(db, who, ctx, create=True)
    people = ctx.people(db)  # the CLI acts as this home's owner
    if (refused := people.set_role(user_id, new_role, by=owner_user_id(ctx.home))) is not None:
        fail(refused, EXIT_REFUSED)
    note(f"[green]✓[/green] {user_id} is now {new_role}")


@users_app.command()
def block(
    who: UserArg,
    unblock: Annotated[bool, typer.Option("--unblock", help="Lift the block.")] = False,
) -> None:
    """Block a user on every platform (their messages are ignored), or lift it."""
    ctx = CliContext.load()
    db = ctx.open_db()
    user_id = _resolve(db, who, ctx)
    people = ctx.people(db)  # the CLI acts as this home's owner
    refused = people.set_blocked(user_id, blocked=not unblock, by=owner_user_id(ctx.home))
    if refused is not None:
        fail(refused, EXIT_REFUSED)
    note(f"[green]✓[/green] {user_id} is {'unblocked' if unblock else 'blocked'}")


@pairing_app.command("list")
def pairing_list(as_json: AsJson = False) -> None:
    """Pending requests (codes last 1 hour)."""
    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    pending = db.access.pending_pairings()
    if as_json:
        print_json(
            [
                {
                    "code": row.code,
                    "platform": row.platform,
                    "platform_user_id": row.platform_user_id,
                    "name": row.display_name,
                    "created_at": row.created_at,
                    "expires_at": row.expires_at,
                }
                for row in pending
            ]
        )
        return
    if not pending:
        note(f"[dim]No pending requests in {ctx.home}.[/dim]")
        return
    table = new_table("code", "platform", "user id", "name", "asked (UTC)", "expires (UTC)")
    for row in pending:
        table.add_row(
            row.code,
            row.platform,
            escape(row.platform_user_id),
            escape(row.display_name),
            f"{row.created_at:%Y-%m-%d %H:%M}",
            f"{row.expires_at:%H:%M}",
        )
    print_table(table)


def _decide(code: str, approve: bool) -> None:
    ctx = CliContext.load()
    people = ctx.people(ctx.open_db())
    done = people.decide_pairing(code, approve=approve, by=owner_user_id(ctx.home))
    if done is None:
        fail(f"no pending request has code {code!r} (codes expire after 1 hour)", EXIT_REFUSED)
    note(f"[green]✓[/green] {escape(done)}")


@pairing_app.command()
def approve(code: Annotated[str, typer.Argument(help="The code the requester got.")]) -> None:
    """Let the requester in."""
    _decide(code, approve=True)


@pairing_app.command()
def deny(code: Annotated[str, typer.Argument(help="The code the requester got.")]) -> None:
    """Refuse the request."""
    _decide(code, approve=False)
