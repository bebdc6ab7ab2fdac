"""`hermes usage`: tokens and cost per person and model, as the dashboard's Usage page
counts them (gateway/dashboard/usage.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import AsJson, new_table, note, print_json, print_table

if TYPE_CHECKING:
    from gateway.dashboard.usage import Sum


def usage(
    days: Annotated[
        int, typer.Option("--days", "-d", help="Over the last N UTC days, today included.")
    ] = 30,
    user: Annotated[
        str | None, typer.Option("--user", help="Only this person (u_… or PLATFORM:ID).")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Tokens the model used in the conversations, per person and per model, with their
    cost where llm.prices names the model."""
    from datetime import UTC, datetime

    from gateway.dashboard.pages import person_name
    from gateway.dashboard.usage import report

    if not 1 <= days <= 3660:
        fail("--days takes 1 to 3660", EXIT_USAGE)
    ctx = CliContext.load(reading=True)
    db = ctx.open_db()
    try:
        user_id = ""
        if user is not None:
            user_id = db.people.resolve(user) or ""
            if not user_id:
                fail(f"no user {user!r} (see hermes users list)", EXIT_REFUSED)
        found = report(db, ctx.config.llm, datetime.now(UTC).date(), days, user_id)
        names = {s.user.id: person_name(s) for s in db.people.users()}
    finally:
        db.close()

    def money(cost: float) -> str:
        return f"{cost:.2f} {found.currency}" if found.priced else "-"

    if as_json:
        print_json(
            {
                "since": found.since.isoformat(),
                "days": found.days,
                "currency": found.currency if found.priced else None,
                "total": _row(found.total, found.priced),
                "people": [
                    {**_row(s, found.priced), "name": names.get(s.key, s.key)} for s in found.people
                ],
                "models": [_row(s, found.priced) for s in found.models],
            }
        )
        return
    total = found.total
    note(
        f"Since {found.since} (UTC): {total.tokens:,} tokens ({total.prompt:,} sent, "
        f"{total.completion:,} written) in {total.calls:,} model calls"
        + (f", {money(total.cost)}" if found.priced else "; no prices set (llm.prices)")
    )
    if not total.calls and not total.tokens:
        return
    table = new_table("who", "tokens", "sent", "written", "calls", "cost")
    for s in found.people:
        table.add_row(
            names.get(s.key, s.key), f"{s.tokens:,}", f"{s.prompt:,}", f"{s.completion:,}",
            f"{s.calls:,}", money(s.cost),
        )  # fmt: skip
    print_table(table)
    models = new_table("model", "tokens", "calls", "cost")
    for s in found.models:
        models.add_row(
            s.key or "(not recorded)", f"{s.tokens:,}", f"{s.calls:,}",
            money(s.cost) if not s.unpriced else "no price set",
        )  # fmt: skip
    print_table(models)


def _row(s: Sum, priced: bool) -> dict[str, object]:
    return {
        "key": s.key,
        "tokens": s.tokens,
        "prompt": s.prompt,
        "completion": s.completion,
        "calls": s.calls,
        "cost": round(s.cost, 6) if priced else None,
        "unpriced_tokens": s.unpriced,
    }
