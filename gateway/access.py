"""Who may talk to the assistant. Default deny.

A platform user gets in when `access.allow_all` is set, when their id is in the
platform's `allowed_users`, when an admin allowed them (pairing approval or `/admin
allow`), when their user is an owner or admin, or when another identity linked to the
same user is allowed. A group chat listed in `allowed_chats` (or allowed by an admin) is
open to everyone in it. Blocks win over everything. A stranger's DM gets a pairing code
(rate limited) and nothing else; a stranger in a group gets silence.

Decisions read state.db through short-lived caches (CACHE_S) so a busy chat costs no
queries; admin commands and linking call `forget()` so their effect is immediate here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum

from gateway.config import HermesConfig
from gateway.events import ChatType, MessageEvent
from hermes.state.db import SessionDB
from hermes.state.models import Identity
from hermes.state.people import PairingRefused, PeopleDB

CACHE_S = 30.0  # changes made anywhere also clear it at once (see PeopleDB.stamp)
PAIRING_REPLY_EVERY_S = 60.0  # a stranger repeating themselves is answered this often
MAX_TRACKED_STRANGERS = 10_000


class Verdict(StrEnum):
    ALLOW = "allow"
    PAIR = "pair"  # a stranger in a DM: answer with a pairing code only
    DENY = "deny"  # silence


@dataclass(frozen=True, slots=True)
class Caller:
    """The person behind an event, as far as access is concerned."""

    user_id: str
    role: str
    platform: str
    platform_user_id: str
    display_name: str

    @property
    def is_admin(self) -> bool:
        return self.role in ("owner", "admin")


class AccessControl:
    def __init__(self, config: HermesConfig, db: SessionDB) -> None:
        self.config, self.db, self.people = config, db, PeopleDB(db)
        self._rules: tuple[dict[tuple[str, str, str], str], float] | None = None
        self._users: dict[str, tuple[str, str, list[Identity], float]] = {}
        self._replied: dict[str, float] = {}

    def forget(self) -> None:
        """Drop cached rules and users (after an admin change or a link)."""
        self._rules = None
        self._users.clear()

    def caller(self, event: MessageEvent, user_id: str) -> Caller:
        role, _, _ = self._user(user_id)
        return Caller(user_id, role, event.platform, event.user.id, event.user.display_name)

    def check(self, event: MessageEvent, user_id: str | None) -> Verdict:
        """The verdict for an event; `user_id` None: an identity we have never seen."""
        role, status, identities = self._user(user_id) if user_id else ("user", "active", [])
        rules = self._rule_map()
        platform = event.platform
        if status == "blocked" or rules.get((platform, "user", event.user.id)) == "block":
            return Verdict.DENY
        group = event.chat.type is not ChatType.DM
        if group and rules.get((platform, "chat", event.chat.id)) == "block":
            return Verdict.DENY
        if (
            self.config.access.allow_all
            or role in ("owner", "admin")
            or any(self._identity_allowed(i.platform, i.platform_user_id) for i in identities)
            or self._identity_allowed(platform, event.user.id)
        ):
            return Verdict.ALLOW
        if group:
            return Verdict.ALLOW if self._chat_allowed(platform, event.chat.id) else Verdict.DENY
        return Verdict.PAIR if self.config.access.pairing else Verdict.DENY

    def pairing_reply(self, event: MessageEvent) -> str | None:
        """The reply to a stranger's DM: their pairing code (None: stay silent for now)."""
        requester = f"{event.platform}:{event.user.id}"
        now = time.monotonic()
        last = self._replied.get(requester)
        if last is not None and now - last < PAIRING_REPLY_EVERY_S:
            return None
        self._replied[requester] = now
        if len(self._replied) > MAX_TRACKED_STRANGERS:  # a flood of strangers: forget the old
            cutoff = now - PAIRING_REPLY_EVERY_S
            self._replied = {k: t for k, t in self._replied.items() if t >= cutoff}
        access = self.config.access
        pairing = self.people.request_pairing(
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
        return (
            f"This assistant is private. To ask for access, give its operator this code: "
            f"`{code}` (valid for 1 hour). They can approve it with `hermes pairing approve "
            f"{code}` or `/admin approve {code}`. If you already use this assistant "
            "elsewhere, send `/link` there and `/link CODE` here instead."
        )

    # -- cached lookups ----------------------------------------------------------------

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
            self._rules = (self.people.rules(), now)
        return self._rules[0]

    def _user(self, user_id: str) -> tuple[str, str, list[Identity]]:
        now = time.monotonic()
        cached = self._users.get(user_id)
        if cached is None or now - cached[3] > CACHE_S:
            user = self.db.get_user(user_id)
            role, status = (user.role, user.status) if user else ("user", "active")
            cached = (role, status, self.db.identities_of(user_id), now)
            self._users[user_id] = cached
        return cached[0], cached[1], cached[2]
