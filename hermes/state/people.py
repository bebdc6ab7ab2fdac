"""People in state.db: users, their identities on each platform, roles and blocks,
identity moves and user merges. Who may talk to the assistant (link codes, pairing
requests, allow/block rules) is hermes/state/access.py; both touch the same stamp.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from sqlalchemy import delete, func, text, update
from sqlmodel import Session, col, select

from hermes.identity import new_user_id, validate_user_id
from hermes.state import engine as eng
from hermes.state import postgres, usage
from hermes.state.memory_log import memory_keys
from hermes.state.models import (
    ChatSession,
    ConsolidationRun,
    ConsolidationState,
    Identity,
    LinkCode,
    Media,
    MemoryEvent,
    MemoryPending,
    MemoryVersion,
    Message,
    OutboxDrop,
    OutboxEntry,
    Reminder,
    User,
    UserAlias,
    as_utc,
    utcnow,
)
from hermes.state.outbox import new_rows_key, outbox_key
from hermes.state.reminders import reminders_key

_ALIAS_OF = "SELECT user_id FROM user_aliases WHERE old_id = ?"
ROLES = ("owner", "admin", "user")
ROLE_RANK = {"user": 0, "admin": 1, "owner": 2}
CHAT_KIND = "chat"  # the owner of a group chat's shared sessions: not a person
CHAT_IDENTITY_PREFIX = "chat:"  # (platform, "chat:<chat id>") names a chat's owner
T = TypeVar("T")
STAMP_FILENAME = "people.stamp"
IDENTITY_TOUCH_INTERVAL = timedelta(minutes=10)  # how stale identities.last_seen may get


@dataclass(frozen=True, slots=True)
class UserSummary:
    user: User
    identities: list[Identity]
    sessions: int
    last_active: datetime | None


class Stamped:
    """A repository whose changes to who someone is or what they may do also touch
    `people.stamp` beside state.db, so other processes (a gateway caching who is who)
    notice a link, block or approval at their next message for the cost of one stat()."""

    def __init__(self, db: eng.Handle) -> None:
        self.engine, self.patience = db.engine, db.patience
        self.stamp_path = db.path.with_name(STAMP_FILENAME)
        # on a database server the stamp is a row (processes on other machines read it)
        self._server = self.engine.dialect.name == "postgresql"

    def stamp(self) -> int:
        if self._server:
            return postgres.stamp(self.engine, "people")
        try:
            return self.stamp_path.stat().st_mtime_ns
        except FileNotFoundError:
            return 0

    def _write(self, work: Callable[[Session], T], keys: eng.Keys) -> T:
        return eng.with_retry(self.engine, work, self.patience, keys=keys)

    def _changed(self, work: Callable[[Session], T], keys: eng.Keys) -> T:
        """A write that changes who someone is or what they may do (locking `keys`)."""
        if self._server:

            def stamped(session: Session) -> T:
                found = work(session)
                postgres.touch(session, "people")
                return found

            return self._write(stamped, keys)
        result = self._write(work, keys)
        fd = os.open(self.stamp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, str(time.time_ns()).encode())
        finally:
            os.close(fd)
        return result


_MAKE_USER = text(
    "INSERT INTO users (id, role, display_name, created_at) VALUES (:id, :role, :name, :now) "
    "ON CONFLICT DO NOTHING"
)


LINK_CODES_KEY = "link-codes"  # link codes are made, used and moved under it (rarely)


def user_key(user_id: str) -> str:
    """The lock (on PostgreSQL) of a person's own row: making them, their role, their
    block, their identities moving."""
    return f"user:{user_id}"


def identity_key(platform: str, platform_user_id: str) -> str:
    """The lock of one account on a platform: whoever makes its identity row takes it."""
    return f"identity:{platform}:{platform_user_id}"


class PeopleDB(Stamped):
    """Users and their identities: who someone is on each platform, roles and blocks,
    chats that own shared sessions, links (merges) and unlinks."""

    # -- users ---------------------------------------------------------------------

    def ensure_user(self, user_id: str, role: str = "user", display_name: str = "") -> User:
        validate_user_id(user_id)

        def work(session: Session) -> User:
            user = session.get(User, user_id)
            if user is not None:  # (nothing written: a read-only home can still be read)
                return user
            now = eng.sql_time(utcnow())
            made = {"id": user_id, "role": role, "name": display_name, "now": now}
            session.execute(_MAKE_USER, made)  # never collides with another maker
            user = session.get(User, user_id)
            assert user is not None
            return user

        return eng.with_retry(self.engine, work, self.patience, keys=[user_key(user_id)])

    def current_id(self, user_id: str) -> str:
        """The id `user_id` has now: the survivor's if it was merged away, else itself.
        (Plain SQL on the pooled connection: every memory write asks.)"""
        row = eng.with_raw_retry(
            self.engine,
            lambda raw: raw.execute(_ALIAS_OF, (user_id,)).fetchone(),
            self.patience,
            begin="DEFERRED",
        )
        return str(row[0]) if row is not None else user_id

    def get_user(self, user_id: str) -> User | None:
        with eng.reading(self.engine) as session:
            return session.get(User, user_id)

    def user_for_identity(
        self, platform: str, platform_user_id: str, display_name: str = ""
    ) -> str:
        """Our user id for a platform identity; a new identity becomes a user of its own."""
        with eng.reading(self.engine) as reader:  # the hot path: a known, recently seen identity
            known = reader.exec(
                select(Identity).where(
                    Identity.platform == platform, Identity.platform_user_id == platform_user_id
                )
            ).first()
        named = known is not None and (known.display_name or not display_name)
        if known is not None and named and utcnow() - known.last_seen < IDENTITY_TOUCH_INTERVAL:
            return known.user_id

        def work(session: Session) -> str:
            row = session.exec(
                select(Identity).where(
                    Identity.platform == platform, Identity.platform_user_id == platform_user_id
                )
            ).first()
            if row is not None:
                row.last_seen = utcnow()
                if display_name:
                    row.display_name = display_name
                    # a person made before their first message (`hermes users role`,
                    # an approval) takes the name their platform gives
                    session.execute(
                        update(User)
                        .where(col(User.id) == row.user_id, col(User.display_name) == "")
                        .values(display_name=display_name)
                    )
                session.add(row)
                return row.user_id
            user = User(id=new_user_id(), display_name=display_name)
            session.add(user)
            session.flush()
            session.add(
                Identity(
                    platform=platform,
                    platform_user_id=platform_user_id,
                    user_id=user.id,
                    display_name=display_name,
                )
            )
            return user.id

        # the identity's own lock: its first messages at once make one user, not two
        key = identity_key(platform, platform_user_id)
        return eng.with_retry(self.engine, work, self.patience, keys=[key])

    def identities_of(self, user_id: str) -> list[Identity]:
        with eng.reading(self.engine) as session:
            rows = session.exec(select(Identity).where(Identity.user_id == user_id))
            return list(rows)

    def users(self) -> list[UserSummary]:
        with eng.reading(self.engine) as session:
            users = list(
                session.exec(
                    select(User).where(User.kind != CHAT_KIND).order_by(col(User.created_at))
                )
            )
            identities: dict[str, list[Identity]] = {}
            for row in session.exec(select(Identity).order_by(col(Identity.id))):
                identities.setdefault(row.user_id, []).append(row)
            stats = {
                user_id: (count, last)
                for user_id, count, last in session.exec(
                    select(
                        ChatSession.user_id,
                        func.count(),
                        func.max(ChatSession.last_active_at),
                    ).group_by(col(ChatSession.user_id))
                )
            }
        out = []
        for user in users:
            count, last = stats.get(user.id, (0, None))
            out.append(UserSummary(user, identities.get(user.id, []), count, last))
        return out

    def ensure_identity(self, platform: str, platform_user_id: str, user_id: str) -> None:
        """Record that `user_id` is reachable as (platform, id), if not known yet."""
        if self.user_by_identity(platform, platform_user_id) is not None:
            return

        def work(session: Session) -> None:
            found = session.exec(
                select(Identity).where(
                    Identity.platform == platform, Identity.platform_user_id == platform_user_id
                )
            ).first()
            if found is None:
                session.add(
                    Identity(platform=platform, platform_user_id=platform_user_id, user_id=user_id)
                )

        self._write(work, [identity_key(platform, platform_user_id)])

    def chat_user(self, platform: str, chat_id: str) -> str:
        """The user owning a group chat's shared sessions, created on first use."""
        ident = CHAT_IDENTITY_PREFIX + chat_id
        known = self.user_by_identity(platform, ident)
        if known is not None:
            return known

        def work(session: Session) -> str:
            found = session.exec(
                select(Identity.user_id).where(
                    Identity.platform == platform, Identity.platform_user_id == ident
                )
            ).first()
            if found is not None:
                return found
            user = User(id=new_user_id(), kind=CHAT_KIND, display_name=f"{platform} chat {chat_id}")
            session.add(user)
            session.flush()
            session.add(Identity(platform=platform, platform_user_id=ident, user_id=user.id))
            return user.id

        return self._write(work, [identity_key(platform, ident)])

    def resolve(self, who: str) -> str | None:
        """A user id from 'u_…' or 'platform:platform user id'; None if no such user."""
        who = who.strip()
        if who.startswith("u_"):
            return who if self.get_user(who) is not None else None
        platform, _, ident = who.partition(":")
        return self.user_by_identity(platform.lower(), ident) if ident else None

    def user_by_identity(self, platform: str, platform_user_id: str) -> str | None:
        with eng.reading(self.engine) as session:
            row = session.exec(
                select(Identity.user_id).where(
                    Identity.platform == platform, Identity.platform_user_id == platform_user_id
                )
            ).first()
            return row

    def set_role(self, user_id: str, role: str) -> bool:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")
        return self._set_user(user_id, role=role)

    def set_status(self, user_id: str, status: str) -> bool:
        return self._set_user(user_id, status=status)

    def _set_user(self, user_id: str, **values: str) -> bool:
        def work(session: Session) -> bool:
            result = session.execute(update(User).where(col(User.id) == user_id).values(**values))
            return bool(getattr(result, "rowcount", 0))

        return self._changed(work, [user_key(user_id)])

    def counts(self) -> tuple[int, int]:
        """(users, sessions started since midnight UTC)."""
        midnight = utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
        with eng.reading(self.engine) as session:
            users = session.exec(
                select(func.count()).select_from(User).where(User.kind != CHAT_KIND)
            ).one()
            today = session.exec(
                select(func.count())
                .select_from(ChatSession)
                .where(col(ChatSession.started_at) >= midnight)
            ).one()
        return int(users), int(today)

    def admin_identities(self) -> list[Identity]:
        """Where the owners and admins (not blocked) can be reached, oldest first."""
        with eng.reading(self.engine) as session:
            query = (
                select(Identity)
                .join(User, col(User.id) == col(Identity.user_id))
                .where(col(User.role).in_(("owner", "admin")), User.status != "blocked")
                .order_by(col(Identity.id))
            )
            return list(session.exec(query))

    # -- moving identities and merging users -------------------------------------------

    def merge_users(self, keep: str, gone: str) -> None:
        """Move everything of `gone` to `keep` in one transaction, then delete `gone`.

        Identities, sessions, messages (their search scope follows through the index
        triggers), memory provenance and undo history (marked done: it describes files
        that no longer exist), consolidation history, provider writes still waiting,
        tokens used (added to the other's) and live link codes all move; the higher role and a block
        are kept; `gone` becomes an alias of `keep` (and so do its own aliases).
        """
        validate_user_id(keep)
        validate_user_id(gone)
        if keep == gone:
            raise ValueError("cannot merge a user into itself")

        def work(session: Session) -> None:
            # `gone`'s row locked first: a write of a row about them still open (its
            # reference holds their row shared) is waited for, so what follows moves
            # it too, where deleting them would have taken it along unseen
            old = session.get(User, gone, with_for_update=True)
            kept = session.get(User, keep)
            if kept is None or old is None:
                raise LookupError("both users must exist to merge them")
            if ROLE_RANK.get(old.role, 0) > ROLE_RANK.get(kept.role, 0):
                kept.role = old.role
            if old.status == "blocked" and kept.role != "owner":  # the owner stays reachable
                kept.status = "blocked"
            kept.display_name = kept.display_name or old.display_name
            kept.timezone = kept.timezone or old.timezone
            session.add(kept)
            moves = (Identity, ChatSession, Message, MemoryEvent, MemoryPending, Media)
            # a provider's waiting writes are delivered under the person who stays, and
            # the consolidations' history is theirs
            for model in (*moves, OutboxEntry, ConsolidationRun):
                session.execute(
                    update(model).where(col(model.user_id) == gone).values(user_id=keep)
                )
            session.execute(
                update(MemoryVersion)
                .where(col(MemoryVersion.user_id) == gone)
                .values(user_id=keep, undone_at=func.coalesce(MemoryVersion.undone_at, utcnow()))
            )
            for owned in ("user_id", "owner_id"):  # reminders follow too
                column = col(getattr(Reminder, owned))
                session.execute(update(Reminder).where(column == gone).values({owned: keep}))
            for moved in (LinkCode, UserAlias):  # a live code of `gone` now joins `keep`
                session.execute(
                    update(moved).where(col(moved.user_id) == gone).values(user_id=keep)
                )
            session.execute(
                delete(ConsolidationState).where(col(ConsolidationState.user_id) == gone)
            )
            _fold_drops(session, keep, gone)
            usage.fold(session, keep, gone)
            session.add(UserAlias(old_id=gone, user_id=keep))
            session.flush()
            session.delete(old)

        self._changed(work, self._everything_of([keep, gone]))

    def _everything_of(self, people: list[str]) -> list[str]:
        """The locks of all these people's rows that writers read and change (a link
        moves them): who they are, their memory, their reminders, their link codes,
        their writes waiting for each provider (whichever providers hold any now) and
        the adding of new ones for any provider."""
        with eng.reading(self.engine) as session:
            providers = set(
                session.exec(
                    select(OutboxEntry.provider)
                    .where(col(OutboxEntry.user_id).in_(people))
                    .distinct()
                )
            )
        keys = [LINK_CODES_KEY, *memory_keys(people)]
        for person in people:
            keys += [user_key(person), reminders_key(person), new_rows_key(person)]
            keys += [outbox_key(provider, person) for provider in sorted(providers)]
        return keys

    def detach_identity(self, user_id: str, platform: str) -> str | None:
        """Give `user_id`'s identity on `platform` a new user of its own; None if none.

        Refuses to detach a user's only identity (there would be nothing left to reach it).
        """

        def work(session: Session) -> str | None:
            rows = list(session.exec(select(Identity).where(Identity.user_id == user_id)))
            mine = [row for row in rows if row.platform == platform]
            if not mine:
                return None
            if len(rows) == len(mine):
                raise ValueError(f"{platform} is this user's only identity; nothing to unlink from")
            fresh = User(id=new_user_id(), display_name=mine[0].display_name)
            session.add(fresh)
            session.flush()
            for row in mine:
                row.user_id = fresh.id
                session.add(row)
            return fresh.id

        return self._changed(work, [user_key(user_id)])


def _fold_drops(session: Session, keep: str, gone: str) -> None:
    """The provider writes given up for `gone` count as `keep`'s (one row per provider
    and person: added to `keep`'s row where there is one, the later reason kept)."""
    gone_rows = session.exec(select(OutboxDrop).where(col(OutboxDrop.user_id) == gone)).all()
    for row in gone_rows:
        kept = session.get(OutboxDrop, (row.provider, keep))
        if kept is None:
            kept = OutboxDrop(provider=row.provider, user_id=keep, dropped=0, last_at=row.last_at)
        kept.dropped += row.dropped
        if as_utc(row.last_at) >= as_utc(kept.last_at):
            kept.last_at, kept.reason = row.last_at, row.reason
        session.delete(row)
        session.flush()
        session.add(kept)
