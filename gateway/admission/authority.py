"""Who may do what to whom: the one decision every surface asks (chat commands, the CLI,
the dashboard) before it acts on a person.

`decide(actor, action, target)` is pure: the two parties' roles and whether each is this
home's owner (the account the CLI runs as, which stays an owner and stays reachable) go in;
None (allowed) or the reason in words comes out. `People.may` looks the parties up.

The rules, by rank (user < admin < owner):
- on oneself: reading and editing one's own memory, reading one's own conversations,
  cancelling one's own reminders, making one's own link code;
- a link code is only ever made by the person it links (a code made for someone else
  would let its maker become them: a link keeps the higher account);
- an owner may act on anyone, other owners included, but this home's owner stays an owner,
  and every owner stays reachable (never blocked: demoted first, by an owner);
- an admin acts on users only (never on another admin or an owner), may step down, and
  never makes anyone an owner;
- what people said (their conversations, and the quotes of it memory provenance shows) is
  the owner's to read across people; an admin manages users' access and memory;
- pairing decisions and the dashboard are for admins and owners; who may use which
  tools (config.yaml's `tools:`) is changed by owners alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

RANK = {"user": 0, "admin": 1, "owner": 2}  # hermes.state.people.ROLE_RANK, by value


class Action(StrEnum):
    SET_ROLE = "change the role of"
    BLOCK = "block or unblock"
    LINK_CODE = "make a link code for"
    DECIDE_PAIRING = "decide a pairing request"
    READ_MEMORY = "read the memory of"
    EDIT_MEMORY = "edit the memory of"
    READ_CONVERSATIONS = "read the conversations of"
    DELETE_CONVERSATIONS = "delete the conversations of"
    CANCEL_REMINDER = "cancel a reminder of"
    USE_DASHBOARD = "use the dashboard"
    CHANGE_TOOLS = "change who may use the tools"
    CONTROL_JOBS = "pause or run the scheduler's jobs"
    EDIT_CONFIG = "change the configuration"


# actions that act on the actor alone, or on a stranger (no target person)
WITHOUT_TARGET = frozenset({Action.DECIDE_PAIRING, Action.USE_DASHBOARD, Action.CONTROL_JOBS})
# for the whole assistant: no target
OWNERS_ONLY = frozenset({Action.CHANGE_TOOLS, Action.EDIT_CONFIG})
SELF_SERVICE = frozenset(
    {
        Action.LINK_CODE,
        Action.READ_MEMORY,
        Action.EDIT_MEMORY,
        Action.READ_CONVERSATIONS,
        Action.DELETE_CONVERSATIONS,
        Action.CANCEL_REMINDER,
    }
)


@dataclass(frozen=True, slots=True)
class Party:
    """One side of a decision: a person's id, role, and whether they are this home's
    owner (the CLI's account)."""

    user_id: str
    role: str
    home_owner: bool = False

    @property
    def rank(self) -> int:
        return 2 if self.home_owner else RANK.get(self.role, 0)


def decide(  # noqa: PLR0911 - a rule table, read top to bottom
    actor: Party, action: Action, target: Party | None = None, *, role: str | None = None
) -> str | None:
    """None when `actor` may do `action` to `target` (`role`: the new role, for
    SET_ROLE); else why not, in words a person can act on."""
    if action in WITHOUT_TARGET:
        return None if actor.rank >= RANK["admin"] else "that needs an admin"
    if action in OWNERS_ONLY:
        return None if actor.rank >= RANK["owner"] else f"only an owner can {action.value}"
    if target is None:
        return "that needs a person to act on"
    myself = target.user_id == actor.user_id
    if action is Action.LINK_CODE:
        return None if myself else "a link code is only made by the person it links"
    if myself and action in SELF_SERVICE:
        return None
    if action is Action.READ_CONVERSATIONS:
        return None if actor.rank >= RANK["owner"] else "only an owner reads other people's words"
    if action is Action.DELETE_CONVERSATIONS:
        return None if actor.rank >= RANK["owner"] else "only an owner deletes other people's words"
    if action is Action.SET_ROLE:
        return _role_change(actor, target, role or "", myself)
    if action is Action.BLOCK and (refused := _unblockable(target, myself)):
        return refused
    if actor.rank >= RANK["owner"]:
        return None
    if actor.rank >= RANK["admin"] and target.rank < RANK["admin"]:
        return None
    if actor.rank >= RANK["admin"]:
        return f"only an owner can {action.value} an admin or an owner"
    return "that needs an admin"


def _unblockable(target: Party, myself: bool) -> str | None:
    if target.home_owner:
        return "the owner cannot be blocked (the owner always stays reachable)"
    if myself:
        return "you cannot block yourself"
    if target.rank >= RANK["owner"]:  # the access verdict lets every owner in
        return "an owner always stays reachable (an owner may demote them first)"
    return None


def _role_change(  # noqa: PLR0911 - a rule table
    actor: Party, target: Party, role: str, myself: bool
) -> str | None:
    if role not in RANK:
        return f"there is no role {role!r}"
    if target.home_owner and role != "owner":
        return "this home's owner stays an owner"
    if actor.rank >= RANK["owner"]:
        return None
    if actor.rank < RANK["admin"]:
        return "that needs an admin"
    if role == "owner":
        return "only an owner can make someone an owner"
    if myself:
        return None if RANK[role] <= actor.rank else "only an owner can raise a role"
    if target.rank >= RANK["admin"]:
        return "only an owner can change the role of an admin or an owner"
    return None
