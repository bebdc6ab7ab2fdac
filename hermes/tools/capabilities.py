"""Which tools a person may use: the one decision behind every turn's tool list and
every tool call, on every surface (a platform chat, the CLI chat, a scheduled prompt run
in its owner's name).

Tools come in groups (a capability): `memory`, `session_search`, `schedule`, `provider`
(the memory provider's tools), `web` (web_search, web_fetch), `message` (to the
person's own linked accounts), `message:<name>` for each chat the owner named in
`message.chats`, `files` (send_file: files the assistant writes, sent in the chat
it is talking in), and `mcp:<server>` for each MCP server the owner plugs in.
config.yaml's `tools:` section says who may use each group, as a list of:
- a role: that role and every higher one (`user` < `admin` < `owner`), so `[user]` is
  everyone admitted and `[admin]` is admins and owners;
- a person: `u_…` (a user id) or `platform:platform user id` (`telegram:12345`), so a
  named person keeps the capability through a link of their accounts;
an empty list is nobody. A group the section does not name keeps its default (below):
everyone for the built-in tools but the web (the owner alone, unless `hermes init` wrote
the operator's choice), the owner alone for an MCP server or a named chat until allowed.

`may_use` is pure; the agent builds the person's `Holder` (their role, whether they are
this home's owner, their linked accounts) once per turn, offers only the tools of the
groups `granted` to them, and asks again when a call runs (a role changed mid-turn).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hermes.config import MCP_NAME
from hermes.identity import owner_user_id

if TYPE_CHECKING:
    from hermes.state.people import PeopleDB

RANK = {"user": 0, "admin": 1, "owner": 2}  # hermes.state.people.ROLE_RANK, by value
MCP_PREFIX = "mcp:"

# group -> (who may use it when config.yaml does not say, what it lets the assistant do)
BUILT_IN: dict[str, tuple[tuple[str, ...], str]] = {
    "memory": (("user",), "Remember what matters about you"),
    "session_search": (("user",), "Search your past conversations"),
    "schedule": (("user",), "Set reminders and scheduled tasks"),
    "provider": (("user",), "The memory provider's own tools"),
    "web": (("owner",), "Search the web and read pages and PDFs"),
    "message": (("user",), "Send messages to your other linked chats"),
    "files": (("user",), "Send you files it writes (a table, notes, an event)"),
}
MCP_DEFAULT: tuple[str, ...] = ("owner",)
MESSAGE_PREFIX = "message:"  # a chat the owner named (message.chats): the owner alone

_USER_ID = re.compile(r"u_[0-9a-f]{16}", re.ASCII)
_IDENTITY = re.compile(r"[a-z]{2,20}:\S{1,200}", re.ASCII)

Table = Mapping[str, Sequence[str]]


@dataclass(frozen=True, slots=True)
class Holder:
    """A person as the decision weighs them: their id, role, whether they are this home's
    owner (the CLI's account, an owner whatever its row says), and their accounts as
    `platform:platform user id`."""

    user_id: str
    role: str
    home_owner: bool = False
    identities: frozenset[str] = frozenset()

    @property
    def rank(self) -> int:
        return RANK["owner"] if self.home_owner else RANK.get(self.role, 0)


class Holders(Protocol):
    """Where a gateway reads its people from (its cache, kept fresh by change stamps):
    `Holder`s without a read of their rows for every turn."""

    def holder(self, user_id: str, *, fresh: bool = False) -> Holder:
        """`user_id` as the decision weighs them; `fresh`: changes made elsewhere this
        very moment are seen (a call checked again as it runs)."""


def groups(
    *,
    provider: bool,
    web: bool,
    message: bool = True,
    files: bool = True,
    mcp_servers: Iterable[str] = (),
    chats: Iterable[str] = (),
) -> list[str]:
    """The groups an assistant has: the built-in ones (`provider` with a memory provider
    configured, `web` with the web extra installed), one per named chat and one per MCP
    server."""
    present = {"provider": provider, "web": web, "message": message, "files": files}
    names = [g for g in BUILT_IN if present.get(g, True)]
    names += [f"{MESSAGE_PREFIX}{chat}" for chat in chats if message]
    return names + [f"{MCP_PREFIX}{server}" for server in mcp_servers]


def holder_of(people: PeopleDB, user_id: str, home: Path) -> Holder:
    """`user_id` as the decision weighs them, read now (blocking: the database executor
    from async code). Someone with no row yet counts as a plain user."""
    user = people.get_user(user_id)
    accounts = people.identities_of(user_id)
    return Holder(
        user_id,
        user.role if user is not None else "user",
        user_id == owner_user_id(home),
        frozenset(f"{a.platform}:{a.platform_user_id}" for a in accounts),
    )


def check_group(name: str) -> str:
    """`name` if it is a group the table may name; ValueError (in words) otherwise."""
    if name in BUILT_IN:
        return name
    for prefix in (MCP_PREFIX, MESSAGE_PREFIX):
        if name.startswith(prefix) and MCP_NAME.fullmatch(name[len(prefix) :]):
            return name
    known = ", ".join([*BUILT_IN, "message:<chat>", "mcp:<server>"])
    raise ValueError(f"there is no tool group {name!r} (known: {known})")


def check_entry(entry: str) -> str:
    """`entry` normalized (a role, a user id, or platform:id); ValueError otherwise."""
    entry = entry.strip()
    lowered = entry.lower()
    if lowered in RANK:
        return lowered
    if _USER_ID.fullmatch(entry):
        return entry
    platform, _, ident = entry.partition(":")
    if ident and _IDENTITY.fullmatch(f"{platform.lower()}:{ident}"):
        return f"{platform.lower()}:{ident}"
    raise ValueError(
        f"{entry!r} is neither a role ({', '.join(RANK)}) nor a person "
        "(u_… or platform:platform user id, e.g. telegram:12345)"
    )


def who_may(group: str, table: Table) -> tuple[str, ...]:
    """Who may use `group`: the table's list, else the group's default."""
    if group in table:
        return tuple(table[group])
    if group.startswith((MCP_PREFIX, MESSAGE_PREFIX)):
        return MCP_DEFAULT
    return BUILT_IN[group][0] if group in BUILT_IN else ()


def may_use(holder: Holder, group: str, table: Table) -> str | None:
    """None when `holder` may use the tools of `group`; else why not, in words."""
    allowed = who_may(group, table)
    for entry in allowed:
        if entry in RANK:
            if holder.rank >= RANK[entry]:
                return None
        elif entry == holder.user_id or entry in holder.identities:
            return None
    if not allowed:
        return f"the {group} tools are turned off here"
    return f"the {group} tools are for {describe(allowed)} here"


def granted(holder: Holder, groups: Iterable[str], table: Table) -> frozenset[str]:
    """The groups among `groups` that `holder` may use."""
    return frozenset(g for g in groups if may_use(holder, g, table) is None)


def summary(group: str) -> str:
    """What the tools of `group` let the assistant do, in words."""
    if group in BUILT_IN:
        return BUILT_IN[group][1]
    if group.startswith(MESSAGE_PREFIX):
        return f"Send messages to the chat {group[len(MESSAGE_PREFIX) :]}"
    return f"Tools of the MCP server {group[len(MCP_PREFIX) :]}"


def simplest(entries: Iterable[str]) -> list[str]:
    """`entries` without repeats and with the lowest role alone (it covers the higher
    ones): [owner, admin, telegram:42] -> [admin, telegram:42]."""
    unique = list(dict.fromkeys(entries))
    roles = [e for e in unique if e in RANK]
    lowest = min(roles, key=RANK.__getitem__) if roles else None
    return [e for e in unique if e not in RANK or e == lowest]


def describe(entries: Sequence[str]) -> str:
    """Who a list names, in words: "admins and owners", "owners and telegram:42"."""
    words = []
    for entry in simplest(entries):
        if entry == "user":
            words.append("everyone admitted")
        elif entry == "admin":
            words.append("admins and owners")
        elif entry == "owner":
            words.append("owners")
        else:
            words.append(entry)
    return ", ".join(words) or "nobody"
