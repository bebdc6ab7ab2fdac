"""Linking identities: one person on several platforms becomes one user with one memory.

`/link` mints a one-time code for the asking user; redeeming it from another identity
(or the CLI owner) merges the two users: their memory stores (see memory/merge.py), then
identities, sessions and messages in one transaction. The surviving id is the CLI owner's
if either is the owner, else the higher role's, else the code creator's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hermes.identity import owner_user_id
from hermes.memory.merge import MergeError, MergeReport
from hermes.memory.service import MemoryService
from hermes.state.db import SessionDB
from hermes.state.people import ROLE_RANK, Redeem


@dataclass(frozen=True, slots=True)
class LinkOutcome:
    ok: bool
    message: str
    user_id: str | None = None  # the user the identity belongs to now
    merged_away: str | None = None  # the id that no longer exists
    report: MergeReport | None = None


def link_with_code(
    memory: MemoryService,
    db: SessionDB,
    code: str,
    *,
    requester: str,
    current_user: str,
) -> LinkOutcome:
    """Attach `current_user` (whose identity is `requester`, e.g. 'slack:U1') to the
    user that minted `code`."""
    people = db.people
    redeemed = people.redeem_link_code(code, requester)
    if redeemed.status is Redeem.LOCKED:
        until = f"{redeemed.locked_until:%H:%M} UTC" if redeemed.locked_until else "later"
        return LinkOutcome(False, f"Too many wrong codes. Linking is locked until {until}.")
    if redeemed.status is Redeem.INVALID or redeemed.user_id is None:
        return LinkOutcome(
            False,
            "That code is not valid: it is wrong, used or expired (codes last 10 minutes). "
            "Send /link where you are already known to get a new one.",
        )
    creator = redeemed.user_id
    if creator == current_user:
        return LinkOutcome(True, "This account is already linked to you.", creator)
    keep, gone = _survivor(memory.home, db, creator, current_user)
    try:
        report = memory.merge(keep, gone)
    except MergeError as exc:
        return LinkOutcome(False, f"Could not merge the memories: {exc}")
    people.merge_users(keep, gone)
    return LinkOutcome(
        True,
        f"Linked. These accounts are now one person ({keep}); {report.describe()}.",
        keep,
        gone,
        report,
    )


def _survivor(home: Path, db: SessionDB, creator: str, other: str) -> tuple[str, str]:
    owner = owner_user_id(home)
    if owner in (creator, other):
        return (owner, other if owner == creator else creator)
    a, b = db.people.get_user(creator), db.people.get_user(other)
    rank_a = ROLE_RANK.get(a.role, 0) if a else 0
    rank_b = ROLE_RANK.get(b.role, 0) if b else 0
    return (other, creator) if rank_b > rank_a else (creator, other)


def unlink_platform(db: SessionDB, user_id: str, platform: str) -> tuple[bool, str]:
    try:
        fresh = db.people.detach_identity(user_id, platform)
    except ValueError as exc:
        return False, str(exc).capitalize() + "."
    if fresh is None:
        return False, f"No {platform} account is linked to you."
    return True, (
        f"Unlinked your {platform} account: it is a separate person again ({fresh}), "
        "starting with an empty memory. Your memory and conversations stay with you."
    )
