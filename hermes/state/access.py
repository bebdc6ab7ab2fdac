"""Who may talk to the assistant, in state.db: link codes (one person across platforms)
with a lockout, pairing requests from strangers, and run-time allow/block rules.

Codes come from `secrets` over an alphabet without look-alikes (no 0/O, 1/I/L). A
change here touches the people stamp too (`Stamped`), as a change of who someone is does.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import delete, func, or_, update
from sqlmodel import Session, col, select

from hermes.identity import validate_user_id
from hermes.state import engine as eng
from hermes.state.models import (
    AccessFailure,
    AccessRule,
    LinkCode,
    PairingRequest,
    as_utc,
    utcnow,
)
from hermes.state.people import LINK_CODES_KEY, Stamped

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
LINK_CODE_TTL = timedelta(minutes=10)
PAIRING_TTL = timedelta(hours=1)
ACCESS_KEY = "access"  # pairing requests and access rules are written under it (rarely)
STALE_BATCH = 500  # requesters forgotten in one transaction (`forget_stale`)
MAX_FAILURES = 5
LOCKOUT = timedelta(minutes=30)


@dataclass(frozen=True, slots=True)
class Lockout:
    """After `limit` failures of one requester, nothing is tried for `lasts` (the right
    answer included: a guesser learns nothing while locked out); with `forgiven_after`,
    failures that long ago (counted from the last one) are forgotten."""

    limit: int
    lasts: timedelta
    forgiven_after: timedelta | None = None


LINK_CODES = Lockout(MAX_FAILURES, LOCKOUT)


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text: str) -> str:
    """What a person typed, as a code: case and separators forgiven."""
    return "".join(ch for ch in text.upper() if ch.isalnum())


class Redeem(StrEnum):
    OK = "ok"
    INVALID = "invalid"  # unknown, used or expired: indistinguishable on purpose
    LOCKED = "locked"


@dataclass(frozen=True, slots=True)
class Redeemed:
    status: Redeem
    user_id: str | None = None
    locked_until: datetime | None = None


class PairingRefused(StrEnum):
    FULL = "full"  # too many pending for this platform
    RATE = "rate"  # this requester asked too often


@dataclass(frozen=True, slots=True)
class Pairing:
    request: PairingRequest | None
    fresh: bool = False  # a new code (the requester has not been told it yet)
    refused: PairingRefused | None = None


class AccessDB(Stamped):
    """Link codes, pairing requests and access rules."""

    # -- link codes ------------------------------------------------------------------

    def create_link_code(self, user_id: str, ttl: timedelta = LINK_CODE_TTL) -> LinkCode:
        validate_user_id(user_id)
        now = utcnow()

        def work(session: Session) -> LinkCode:
            # one live code per user: a new /link replaces the previous one
            session.execute(
                delete(LinkCode).where(
                    col(LinkCode.user_id) == user_id, col(LinkCode.used_at).is_(None)
                )
            )
            row = LinkCode(code=new_code(), user_id=user_id, created_at=now, expires_at=now + ttl)
            session.add(row)
            return row

        return self._write(work, [LINK_CODES_KEY])

    def link_code_owner(self, code: str) -> str | None:
        """Who made `code`, while it can still be used (nothing is counted: a wrong
        code is counted by `redeem_link_code`)."""
        code = normalize_code(code)
        if len(code) != CODE_LENGTH:
            return None
        with eng.reading(self.engine) as session:
            row = session.get(LinkCode, code)
        if row is None or row.used_at is not None or row.expires_at <= utcnow():
            return None
        return row.user_id

    def redeem_link_code(self, code: str, requester: str) -> Redeemed:
        """Use a code once. Failures count per requester; 5 lock it out for a while."""
        code = normalize_code(code)

        def work(session: Session) -> Redeemed:
            now = utcnow()
            if (until := _locked(session, requester, now)) is not None:
                return Redeemed(Redeem.LOCKED, locked_until=until)
            row = session.get(LinkCode, code) if len(code) == CODE_LENGTH else None
            if row is not None and row.used_at is None and row.expires_at > now:
                row.used_at = now
                session.add(row)
                _forget(session, requester)
                return Redeemed(Redeem.OK, row.user_id)
            locked = _fail(session, requester, now, LINK_CODES)
            return Redeemed(Redeem.LOCKED if locked else Redeem.INVALID, locked_until=locked)

        return self._write(work, [LINK_CODES_KEY, _guesser(requester)])

    # -- lockouts of other guessers (the dashboard's logins) -------------------------

    def locked_until(self, requesters: list[str]) -> datetime | None:
        """The latest time any of `requesters` is locked out until, None when none is.
        In state.db, so every gateway serving the same people, and a restart, see it."""
        now = utcnow()
        with eng.reading(self.engine) as session:
            found = [_locked(session, requester, now) for requester in requesters]
        return max((until for until in found if until is not None), default=None)

    def failed(self, rules: dict[str, Lockout]) -> None:
        """One failure of each requester, counted under its rule (one transaction)."""

        def work(session: Session) -> None:
            now = utcnow()
            for requester, rule in rules.items():
                _fail(session, requester, now, rule)

        self._write(work, [_guesser(requester) for requester in rules])

    def succeeded(self, requester: str) -> None:
        """`requester` got in: their failures are forgotten."""
        self._write(lambda session: _forget(session, requester), [_guesser(requester)])

    def forget_stale(self, prefix: str, rule: Lockout) -> int:
        """Delete the rows of requesters whose name starts with `prefix` that `rule` has
        forgotten anyway (no failure for its quiet spell, no lockout running), so that
        guessers from ever new addresses leave a bounded table behind; how many went."""
        quiet = rule.forgiven_after or rule.lasts
        now = utcnow()
        forgotten = (
            col(AccessFailure.requester).startswith(prefix, autoescape=True),
            col(AccessFailure.updated_at) < now - quiet,
            or_(col(AccessFailure.locked_until).is_(None), col(AccessFailure.locked_until) < now),
        )

        def batch(session: Session) -> tuple[int, int]:
            found = select(AccessFailure.requester).where(*forgotten).limit(STALE_BATCH)
            names = list(session.exec(found))
            eng.lock_keys(session, [_guesser(name) for name in names])
            # asked again under their locks: one who failed meanwhile stays
            gone = col(AccessFailure.requester).in_(names)
            result = session.execute(delete(AccessFailure).where(gone, *forgotten))
            return int(getattr(result, "rowcount", 0) or 0), len(names)

        # a batch at a time: guessers from ever new addresses may leave many rows, and
        # each one's lock is held to the end of its transaction
        total = 0
        while True:
            deleted, seen = self._write(batch, ())
            total += deleted
            if seen < STALE_BATCH:
                return total

    # -- pairing ---------------------------------------------------------------------

    def request_pairing(
        self,
        platform: str,
        platform_user_id: str,
        display_name: str,
        *,
        chat_id: str = "",
        max_pending: int = 3,
        max_per_day: int = 3,
    ) -> Pairing:
        """The requester's live code, or a new one within the limits."""

        def work(session: Session) -> Pairing:
            now = utcnow()
            mine = list(
                session.exec(
                    select(PairingRequest).where(
                        PairingRequest.platform == platform,
                        PairingRequest.platform_user_id == platform_user_id,
                        col(PairingRequest.created_at) > now - timedelta(days=1),
                    )
                )
            )
            live = [r for r in mine if r.status == "pending" and r.expires_at > now]
            if live:
                return Pairing(live[0])
            if len(mine) >= max_per_day:
                return Pairing(None, refused=PairingRefused.RATE)
            pending = session.exec(
                select(func.count())
                .select_from(PairingRequest)
                .where(
                    PairingRequest.platform == platform,
                    PairingRequest.status == "pending",
                    col(PairingRequest.expires_at) > now,
                )
            ).one()
            if pending >= max_pending:
                return Pairing(None, refused=PairingRefused.FULL)
            row = PairingRequest(
                code=new_code(),
                platform=platform,
                platform_user_id=platform_user_id,
                display_name=display_name,
                chat_id=chat_id,
                created_at=now,
                expires_at=now + PAIRING_TTL,
            )
            session.add(row)
            return Pairing(row, fresh=True)

        return self._write(work, [ACCESS_KEY])

    def pending_pairings(self) -> list[PairingRequest]:
        now = utcnow()
        with eng.reading(self.engine) as session:
            query = (
                select(PairingRequest)
                .where(PairingRequest.status == "pending", col(PairingRequest.expires_at) > now)
                .order_by(col(PairingRequest.created_at))
            )
            return list(session.exec(query))

    def pairing(self, code: str) -> PairingRequest | None:
        """A pairing request by its code, whatever its state."""
        with eng.reading(self.engine) as session:
            return session.get(PairingRequest, normalize_code(code))

    def decide_pairing(self, code: str, approve: bool, by: str) -> PairingRequest | None:
        """Approve (allowing that platform user) or deny a live request; None if no such."""
        code = normalize_code(code)

        def work(session: Session) -> PairingRequest | None:
            now = utcnow()
            row = session.get(PairingRequest, code)
            if row is None or row.status != "pending" or row.expires_at <= now:
                return None
            row.status = "approved" if approve else "denied"
            row.decided_by, row.decided_at = by, now
            session.add(row)
            if approve:
                session.merge(
                    AccessRule(
                        platform=row.platform,
                        kind="user",
                        subject=row.platform_user_id,
                        rule="allow",
                        created_by=by,
                    )
                )
            return row

        return self._changed(work, [ACCESS_KEY])

    def unannounced_approvals(self) -> list[PairingRequest]:
        """Approved requests whose requester has not been told yet (a day at most)."""
        since = utcnow() - timedelta(days=1)
        with eng.reading(self.engine) as session:
            query = select(PairingRequest).where(
                PairingRequest.status == "approved",
                col(PairingRequest.notified_at).is_(None),
                col(PairingRequest.decided_at) > since,
            )
            return list(session.exec(query))

    def claim_announcement(self, code: str) -> bool:
        """Mark a request as announced; False if someone else already did (tell once)."""

        def work(session: Session) -> bool:
            result = session.execute(
                update(PairingRequest)
                .where(col(PairingRequest.code) == code, col(PairingRequest.notified_at).is_(None))
                .values(notified_at=utcnow())
            )
            return bool(getattr(result, "rowcount", 0))

        return self._write(work, ())  # one row's conditional update: its own row lock

    # -- access rules ----------------------------------------------------------------

    def set_rule(self, rule: AccessRule) -> None:
        self._changed(lambda session: session.merge(rule), [ACCESS_KEY])

    def rules(self) -> dict[tuple[str, str, str], str]:
        """(platform, kind, subject) -> allow | block."""
        with eng.reading(self.engine) as session:
            return {
                (r.platform, r.kind, r.subject): r.rule for r in session.exec(select(AccessRule))
            }


def _guesser(requester: str) -> str:
    """The lock (on PostgreSQL) of one requester's count of wrong guesses."""
    return f"guesses:{requester}"


def _locked(session: Session, requester: str, now: datetime) -> datetime | None:
    failure = session.get(AccessFailure, requester)
    until = as_utc(failure.locked_until) if failure and failure.locked_until else None
    return until if until is not None and until > now else None


def _fail(session: Session, requester: str, now: datetime, rule: Lockout) -> datetime | None:
    """Count one failure of `requester`; the time they are locked out until when this one
    reaches the rule's limit (the count starts again), else None."""
    failure = session.get(AccessFailure, requester) or AccessFailure(requester=requester)
    quiet = rule.forgiven_after
    if quiet is not None and failure.failures and now - as_utc(failure.updated_at) >= quiet:
        failure.failures = 0
    failure.failures += 1
    failure.updated_at = now
    locked = None
    if failure.failures >= rule.limit:
        locked = failure.locked_until = now + rule.lasts
        failure.failures = 0
    session.add(failure)
    return locked


def _forget(session: Session, requester: str) -> None:
    if (failure := session.get(AccessFailure, requester)) is not None:
        session.delete(failure)
