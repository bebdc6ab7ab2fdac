"""A person: who is behind an event, and whether they may talk to the assistant.

The one home of identity lookup, access verdicts, roles, linking, pairing replies and
their cache. Intake resolves
every event once into a `Person` value, and everything downstream (commands, the turn)
receives that value instead of looking the person up again.

Access is default deny. A platform user gets in when `access.allow_all` is set, when
their id is in the platform's `allowed_users`, when an admin allowed them (pairing
approval or `/admin allow`), when their user is an owner or admin, or when another
identity linked to the same user is allowed. A group chat listed in `allowed_chats`
(or allowed by an admin) is open to everyone in it. Blocks win over everything. A
stranger's DM gets a pairing code (rate limited) and nothing else; a stranger in a
group gets silence.

Lookups read state.db through one cache (CACHE_S); a change made here or by another
process (the CLI linking, approving or blocking someone: `PeopleDB.stamp`) clears it
at the next event, so its effect is immediate.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.admission.authority import Action, Party, decide
from gateway.config import HermesConfig
from gateway.edge.events import MessageEvent
from hermes.identity import owner_user_id
from hermes.memory.merge import MergeError, MergeReport
from hermes.memory.service import MemoryService
from hermes.memory.store import StoreError
from hermes.places import ChatType
from hermes.state.access import PairingRefused, Redeem
from hermes.state.db import SessionDB
from hermes.state.models import Identity, PairingRequest
from hermes.state.people import ROLE_RANK
from hermes.tools.capabilities import Holder

logger = logging.getLogger(__name__)
GATE_HOPS = 8  # a link follows at most this many other links made while it waited

# a busy chat costs no queries; a change made anywhere clears the caches at once anyway
# (the stamp file), so these only bound how long a missed notice could last
IDENTITY_CACHE_S = 10.0
CACHE_S = 30.0
SYNCED_S = 1.0  # a look for changes made elsewhere this recent is not made again (holder)
PAIRING_REPLY_EVERY_S = 60.0  # a stranger repeating themselves is answered this often
MAX_TRACKED_STRANGERS = 10_000
ADMIN_ROLES = ("owner", "admin")


class Verdict(StrEnum):
    ALLOW = "allow"
    PAIR = "pair"  # a stranger in a DM: answer with a pairing code only
    DENY = "deny"  # silence


@dataclass(frozen=True, slots=True)
class Person:
    """The person behind one event, resolved once (see People.resolve)."""

    user_id: str  # our user id; a stranger gets one only when they may do something
    role: str
    platform: str
    platform_user_id: str
    display_name: str
    verdict: Verdict = Verdict.ALLOW

    @property
    def is_admin(self) -> bool:
        return self.role in ADMIN_ROLES

    @property
    def admitted(self) -> bool:
        return self.verdict is Verdict.ALLOW


@dataclass(frozen=True, slots=True)
class LinkOutcome:
    ok: bool
    message: str
    user_id: str | None = None  # the user the identity belongs to now
    merged_away: str | None = None  # the id that no longer exists
    report: MergeReport | None = None


@dataclass(frozen=True, slots=True)
class _UserFacts:
    role: str
    status: str
    identities: tuple[Identity, ...]
    read_at: float


class People:
    def __init__(self, config: HermesConfig, db: SessionDB, memory: MemoryService) -> None:
        self.config, self.db, self.repo, self.memory = config, db, db.people, memory
        self.access = db.access  # link codes, pairing requests, allow/block rules
        self._stamp = self.repo.stamp()
        self._synced_at = time.monotonic()
        self._identities: dict[tuple[str, str], tuple[str | None, float]] = {}
        self._users: dict[str, _UserFacts] = {}
        self._rules: tuple[dict[tuple[str, str, str], str], float] | None = None
        self._chat_owners: dict[tuple[str, str], str] = {}
        self._replied: dict[str, float] = {}
        self._listeners: list[Callable[[], None]] = []
        self._pairing_listeners: list[Callable[[PairingRequest], None]] = []
        # resolving runs on the database executor's threads (`aresolve`): its caches are
        # kept under this lock, and listeners are called on the event loop
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- resolving an event --------------------------------------------------------------

    async def aresolve(self, event: MessageEvent, *, create: bool = False) -> Person:
        """`resolve`, awaited from the event loop (its reads happen on the database
        executor's threads)."""
        self._loop = asyncio.get_running_loop()
        return await self.db.run(self.resolve, event, create=create)

    async def apairing_reply(self, event: MessageEvent) -> str | None:
        """`pairing_reply`, awaited from the event loop."""
        self._loop = asyncio.get_running_loop()
        return await self.db.run(self.pairing_reply, event)

    def resolve(self, event: MessageEvent, *, create: bool = False) -> Person:
        """Who sent `event` and the access verdict. An admitted person (or, with
        `create`, any sender) is registered as a user; a stranger is not."""
        with self._lock:
            self.sync()
            platform, ident, name = event.platform, event.user.id, event.user.display_name
            known = self._known_user(platform, ident)
            verdict = self._verdict(event, known)
            user_id = known or ""
            if verdict is Verdict.ALLOW or create:
                user_id = self._register(platform, ident, name)
            role = self._facts(user_id).role if user_id else "user"
            return Person(user_id, role, platform, ident, name, verdict)

    def owns(self, platform: str, ident: str) -> bool:
        """Whether this platform account is an owner's: the owner always stays reachable,
        so no block or rule may deny it (checked where rules are set, and in the verdict)."""
        self.sync()
        user_id = self._known_user(platform, ident)
        return user_id is not None and self._facts(user_id).role == "owner"

    def _verdict(self, event: MessageEvent, user_id: str | None) -> Verdict:
        facts = self._facts(user_id) if user_id else None
        if facts is not None and facts.role == "owner":
            return Verdict.ALLOW  # whatever a rule or a block says: see `owns`
        rules = self._rule_map()
        platform = event.platform
        if (facts and facts.status == "blocked") or rules.get(
            (platform, "user", event.user.id)
        ) == "block":
            return Verdict.DENY
        group = event.chat.type is not ChatType.DM
        if group and rules.get((platform, "chat", event.chat.id)) == "block":
            return Verdict.DENY
        identities = facts.identities if facts else ()
        if (
            self.config.access.allow_all
            or (facts is not None and facts.role in ADMIN_ROLES)
            or any(self._identity_allowed(i.platform, i.platform_user_id) for i in identities)
            or self._identity_allowed(platform, event.user.id)
        ):
            return Verdict.ALLOW
        if group:
            return Verdict.ALLOW if self._chat_allowed(platform, event.chat.id) else Verdict.DENY
        return Verdict.PAIR if self.config.access.pairing else Verdict.DENY

    def chat_owner(self, platform: str, chat_id: str) -> str:
        """The user that owns a group chat's shared sessions (`group_scope: per_chat`):
        not a person, so it has no memory and never talks; its sessions are the chat's."""
        key = (platform, chat_id)
        owner = self._chat_owners.get(key)
        if owner is None:
            owner = self.repo.chat_user(platform, chat_id)
            self._chat_owners[key] = owner
        return owner

    # -- pairing -------------------------------------------------------------------------

    def pairing_reply(self, event: MessageEvent) -> str | None:
        """The reply to a stranger's DM: their pairing code (None: stay silent for now)."""
        requester = f"{event.platform}:{event.user.id}"
        now = time.monotonic()
        with self._lock:
            last = self._replied.get(requester)
            if last is not None and now - last < PAIRING_REPLY_EVERY_S:
                return None
            self._replied[requester] = now
            if len(self._replied) > MAX_TRACKED_STRANGERS:  # a flood of strangers
                cutoff = now - PAIRING_REPLY_EVERY_S
                self._replied = {k: t for k, t in self._replied.items() if t >= cutoff}
        access = self.config.access
        pairing = self.access.request_pairing(
            event.platform,
            event.user.id,
            event.user.display_name,
            chat_id=event.chat.id,
            max_pending=access.max_pending_pairings,
            max_per_day=access.pairing_codes_per_day,
        )
        if pairing.refused is PairingRefused.FULL:
            return (
                "This assistant is private, and too many access requests are waiting right "
                "now. Please try again later."
            )
        if pairing.refused is PairingRefused.RATE or pairing.request is None:
            return "This assistant is private. You have asked for access too often today."
        code = pairing.request.code
        if pairing.fresh:
            for listener in self._pairing_listeners:
                self._tell(listener, pairing.request)
        return (
            f"This assistant is private. To ask for access, give its operator this code: "
            f"`{code}` (valid for 1 hour). They can approve it with `hermes pairing approve "
            f"{code}` or `/admin approve {code}`. If you already use this assistant "
            "elsewhere, send `/link` there and `/link CODE` here instead."
        )

    # -- linking ---------------------------------------------------------------------------

    def link(self, code: str, *, requester: str, current_user: str) -> LinkOutcome:
        """Join `current_user` (whose identity is `requester`, e.g. 'slack:U1') to the
        user that minted `code`: their memories merge (the memory service), then their
        identities, sessions and messages (state.db). The survivor is the CLI owner if
        either is, else the higher role, else the code's creator.

        The whole link holds the memory gate exclusively (hermes/memory/gate.py): two
        links of a chain run one after the other, each on the ids as they are then.
        """
        outcome = self._gated_link(code, requester=requester, current_user=current_user)
        if outcome.merged_away is not None:
            self.changed()
        return outcome

    async def link_from_chat(self, code: str, *, requester: str, current_user: str) -> LinkOutcome:
        """`link` for the event loop: the link itself in a thread (it waits for the
        memory gate, and for a provider write of the person in flight, which finishes
        on the loop), the listeners told on the loop, as every other change."""
        outcome = await asyncio.to_thread(
            self._gated_link, code, requester=requester, current_user=current_user
        )
        if outcome.merged_away is not None:
            self.changed()
        return outcome

    def _gated_link(self, code: str, *, requester: str, current_user: str) -> LinkOutcome:
        """The link under the memory gates of the two people it joins (as they are
        now: the code's maker is looked up first), held exclusively; when either was
        linked to someone else while this waited, the gates of whom they became are
        taken instead. Writes and links of everyone else go on meanwhile."""
        try:
            for _ in range(GATE_HOPS):
                people = self._linked_people(code, current_user)
                with self.memory.gate(people, exclusive=True):
                    if self._linked_people(code, current_user) != people:
                        continue  # one of them moved meanwhile: their new gate first
                    return self._link(code, requester=requester, current_user=current_user)
        except StoreError as exc:
            return LinkOutcome(False, f"Could not merge the memories: {exc}")
        return LinkOutcome(False, "Memory is busy with other links of these accounts; try again.")

    def _linked_people(self, code: str, current_user: str) -> list[str]:
        """Whom a link with `code` would join, as they are now: the code's maker (when
        the code is one) and the person asking."""
        maker = self.access.link_code_owner(code)
        people = {self.repo.current_id(current_user)}
        if maker is not None:
            people.add(self.repo.current_id(maker))
        return sorted(people)

    def _link(self, code: str, *, requester: str, current_user: str) -> LinkOutcome:
        redeemed = self.access.redeem_link_code(code, requester)
        if redeemed.status is Redeem.LOCKED:
            until = f"{redeemed.locked_until:%H:%M} UTC" if redeemed.locked_until else "later"
            return LinkOutcome(False, f"Too many wrong codes. Linking is locked until {until}.")
        if redeemed.status is Redeem.INVALID or redeemed.user_id is None:
            return LinkOutcome(
                False,
                "That code is not valid: it is wrong, used or expired (codes last 10 minutes). "
                "Send /link where you are already known to get a new one.",
            )
        # either side may have been merged into someone else since it was looked up
        creator = self.repo.current_id(redeemed.user_id)
        current = self.repo.current_id(current_user)
        if creator == current:
            return LinkOutcome(True, "This account is already linked to you.", creator)
        keep, gone = self._survivor(creator, current)
        try:
            report = self.memory.merge(keep, gone)
        except MergeError as exc:
            return LinkOutcome(False, f"Could not merge the memories: {exc}")
        self.repo.merge_users(keep, gone)
        logger.info("linked %s into %s", gone, keep)
        return LinkOutcome(
            True,
            f"Linked. These accounts are now one person ({keep}); {report.describe()}.",
            keep,
            gone,
            report,
        )

    def unlink(self, user_id: str, platform: str) -> tuple[bool, str]:
        """Detach the user's account on `platform`: it becomes a person of its own."""
        try:
            fresh = self.repo.detach_identity(user_id, platform)
        except ValueError as exc:
            return False, str(exc).capitalize() + "."
        if fresh is None:
            return False, f"No {platform} account is linked to you."
        self.changed()
        return True, (
            f"Unlinked your {platform} account: it is a separate person again ({fresh}), "
            "starting with an empty memory. Your memory and conversations stay with you."
        )

    def _survivor(self, creator: str, other: str) -> tuple[str, str]:
        owner = owner_user_id(self.memory.home)
        if owner in (creator, other):
            return (owner, other if owner == creator else creator)
        a, b = self.repo.get_user(creator), self.repo.get_user(other)
        rank_a = ROLE_RANK.get(a.role, 0) if a else 0
        rank_b = ROLE_RANK.get(b.role, 0) if b else 0
        return (other, creator) if rank_b > rank_a else (creator, other)

    # -- changes ---------------------------------------------------------------------------

    def on_pairing(self, listener: Callable[[PairingRequest], None]) -> None:
        """Call `listener` with each new pairing request (to put it to the admins)."""
        self._pairing_listeners.append(listener)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` whenever identities, roles or access rules change."""
        self._listeners.append(listener)

    def party(self, user_id: str) -> Party | None:
        """A person as `authority.decide` weighs them (None: nobody has that id)."""
        found = self.repo.get_user(user_id)
        return None if found is None else self.party_of(found.id, found.role)

    def party_of(self, user_id: str, role: str) -> Party:
        """A person already read (a listing's row), as `authority.decide` weighs them:
        this home's owner is the one whose id the home holds."""
        return Party(user_id, role, user_id == owner_user_id(self.memory.home))

    def may(
        self, actor: str, action: Action, target: str | None = None, *, role: str | None = None
    ) -> str | None:
        """None when person `actor` may do `action` to person `target`; else why not, in
        words. Every surface asks this one decision (gateway/admission/authority.py)."""
        me = self.party(actor)
        if me is None:
            return f"no user {actor}"
        them = None
        if target is not None and (them := self.party(target)) is None:
            return f"no user {target}"
        return decide(me, action, them, role=role)

    def decide_pairing(self, code: str, *, approve: bool, by: str) -> str | None:
        """Let a pairing requester in (or refuse them), for the chat's `/admin approve`,
        the dashboard and `hermes pairing approve` alike: what was done, in words; None
        when no pending request has `code` (codes expire). PermissionError: `by` may not."""
        if (refused := self.may(by, Action.DECIDE_PAIRING)) is not None:
            raise PermissionError(refused)
        row = self.access.decide_pairing(code, approve, by=by)
        if row is None:
            return None
        self.changed()
        verb = "Approved" if approve else "Denied"
        who = row.display_name or row.platform_user_id
        return f"{verb}: {row.platform} user {who} ({row.platform_user_id})."

    def set_blocked(self, user_id: str, *, blocked: bool, by: str) -> str | None:
        """Block a person on every platform (or lift it), for `hermes users block` and
        the dashboard alike; why not, in words, when `by` may not (the owner always stays
        reachable, an admin acts on users only)."""
        if (refused := self.may(by, Action.BLOCK, user_id)) is not None:
            return refused
        self.repo.set_status(user_id, "blocked" if blocked else "active")
        if blocked:
            self.db.dashboard.end_all(user_id)
        self.changed()
        return None

    def set_role(self, user_id: str, role: str, *, by: str) -> str | None:
        """A person's new role; why not, in words, when `by` may not give it (this home's
        owner stays an owner; only an owner makes or changes an owner)."""
        found = self.repo.get_user(user_id)
        if (refused := self.may(by, Action.SET_ROLE, user_id, role=role)) is not None:
            return refused
        assert found is not None  # may() found them
        self.repo.set_role(user_id, role)
        if ROLE_RANK.get(role, 0) < ROLE_RANK.get(found.role, 0):
            self.db.dashboard.end_all(user_id)  # a dashboard login needs admin or owner
        self.changed()
        return None

    def link_code(self, user_id: str, *, by: str) -> str:
        """A new link code for `user_id`, made by `by`: only ever the person it links.
        PermissionError otherwise (a code made for someone else would let its maker become
        them: a link keeps the higher of the two accounts)."""
        if (refused := self.may(by, Action.LINK_CODE, user_id)) is not None:
            raise PermissionError(refused)
        return self.access.create_link_code(user_id).code

    def changed(self) -> None:
        """Identities, roles or rules changed (here or elsewhere): re-read them."""
        with self._lock:
            self._stamp = self.repo.stamp()
            self._identities.clear()
            self._users.clear()
            self._rules = None
        for listener in self._listeners:
            self._tell(listener)

    def _tell(self, listener: Callable[..., None], *args: Any) -> None:
        """Call `listener` on the event loop (from a database thread: handed to it)."""
        loop = self._loop
        if loop is not None and not loop.is_closed() and not _running(loop):
            loop.call_soon_threadsafe(listener, *args)
        else:
            listener(*args)

    def sync(self) -> None:
        """Notice changes made by another process (one stat of the stamp file)."""
        self._synced_at = time.monotonic()
        if self.repo.stamp() != self._stamp:
            self.changed()

    def holder(self, user_id: str, *, fresh: bool = False) -> Holder:
        """`user_id` as the tool capabilities weigh them (blocking: the database executor
        from async code), from the cache: changes made elsewhere are noticed first when
        the last look is older than SYNCED_S (intake looked for the event a turn answers
        a moment ago), or always with `fresh` (a tool call, checked again as it runs).
        Someone with no row yet counts as a plain user."""
        if fresh or time.monotonic() - self._synced_at > SYNCED_S:
            self.sync()
        with self._lock:
            facts = self._facts(user_id)
        return Holder(
            user_id,
            facts.role,
            user_id == owner_user_id(self.memory.home),
            frozenset(f"{i.platform}:{i.platform_user_id}" for i in facts.identities),
        )

    # -- cached lookups ----------------------------------------------------------------

    def _known_user(self, platform: str, ident: str) -> str | None:
        cached = self._identities.get((platform, ident))
        if cached is not None and time.monotonic() - cached[1] < IDENTITY_CACHE_S:
            return cached[0]
        user_id = self.repo.user_by_identity(platform, ident)
        self._identities[(platform, ident)] = (user_id, time.monotonic())
        return user_id

    def _register(self, platform: str, ident: str, name: str) -> str:
        cached = self._identities.get((platform, ident))
        fresh = cached is not None and time.monotonic() - cached[1] < IDENTITY_CACHE_S
        if cached is not None and cached[0] and fresh:
            if not (name and self._unnamed(cached[0], platform, ident)):
                return cached[0]
            self._users.pop(cached[0], None)  # (named now: read again)
        user_id = self.repo.user_for_identity(platform, ident, name)
        self._identities[(platform, ident)] = (user_id, time.monotonic())
        return user_id

    def _unnamed(self, user_id: str, platform: str, ident: str) -> bool:
        """Whether this account has no name yet (made before its first message, by
        `hermes users role` or an approval): its first message names it."""
        return any(
            i.platform == platform and i.platform_user_id == ident and not i.display_name
            for i in self._facts(user_id).identities
        )

    def _facts(self, user_id: str) -> _UserFacts:
        now = time.monotonic()
        cached = self._users.get(user_id)
        if cached is None or now - cached.read_at > CACHE_S:
            user = self.repo.get_user(user_id)
            role, status = (user.role, user.status) if user else ("user", "active")
            cached = _UserFacts(role, status, tuple(self.repo.identities_of(user_id)), now)
            self._users[user_id] = cached
        return cached

    def _identity_allowed(self, platform: str, platform_user_id: str) -> bool:
        section = getattr(self.config.platforms, platform, None)
        if section is not None and platform_user_id in section.allowed_users:
            return True
        return self._rule_map().get((platform, "user", platform_user_id)) == "allow"

    def _chat_allowed(self, platform: str, chat_id: str) -> bool:
        section = getattr(self.config.platforms, platform, None)
        if section is not None and chat_id in section.allowed_chats:
            return True
        return self._rule_map().get((platform, "chat", chat_id)) == "allow"

    def _rule_map(self) -> dict[tuple[str, str, str], str]:
        now = time.monotonic()
        if self._rules is None or now - self._rules[1] > CACHE_S:
            self._rules = (self.access.rules(), now)
        return self._rules[0]


def _running(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread is the one running `loop`."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


__all__ = ["LinkOutcome", "People", "Person", "Verdict"]
