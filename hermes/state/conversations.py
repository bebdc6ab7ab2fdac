"""Conversations in state.db: sessions, their messages (the hot path), search and
delivery records. Every method that reads conversation data is scoped to one user."""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, or_, text, update
from sqlmodel import Session, col, select

from hermes.identity import validate_user_id
from hermes.state import engine as eng
from hermes.state import postgres
from hermes.state.models import (
    ChatSession,
    Delivery,
    Media,
    Message,
    SystemPrompt,
    as_utc,
    utcnow,
)
from hermes.state.search import (
    RANKING,
    MessageHit,
    Ranking,
    SearchScope,
    people_with_matches,
    search_messages,
)
from hermes.state.usage import ADD_USAGE, ADD_USAGE_STEP, Usage, today
from hermes.state.vectors import QueryVector, VectorDB
from hermes.text import valid_text

TITLE_CHARS = 60
MEDIA_SETTLE = timedelta(hours=1)  # unreferenced bytes younger than this are kept
SEARCH_THREADS = 2  # a search across people on PostgreSQL: connections at once (measured)


def new_session_id() -> str:
    return "s_" + secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How far a platform message's turn got (`ConversationDB.turn_outcome`): new,
    asked, unsent (with its stored reply's id and text) or answered."""

    state: str
    reply_id: int | None = None
    reply: str = ""


@dataclass(frozen=True, slots=True)
class NewMessage:
    """One message to store, in OpenAI chat shape."""

    role: str
    content: str = ""
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    platform_message_id: str | None = None
    token_count: int = 0
    created_at: datetime | None = None
    delivery: str | None = None  # a reply to a platform message: "stored" (Message)

    def __post_init__(self) -> None:  # stored as UTF-8: a lone surrogate cannot be
        object.__setattr__(self, "content", valid_text(self.content))


@dataclass(frozen=True, slots=True)
class Activity:
    received: dict[str, datetime]  # platform -> its last message from a person
    replied: dict[str, datetime]  # platform -> the assistant's last message there
    per_hour: dict[str, int]  # "YYYY-MM-DD HH" (UTC) -> messages received in that hour


def drop_sessions(session: Session, ids: Sequence[str]) -> None:
    """Delete these sessions and their messages (the triggers and cascades take the
    rest: search index, vectors; the media they named goes at the next maintenance)."""
    session.execute(delete(Message).where(col(Message.session_id).in_(ids)))
    session.execute(delete(ChatSession).where(col(ChatSession.id).in_(ids)))


class ConversationDB:
    def __init__(self, db: eng.Handle, vectors: VectorDB | None = None) -> None:
        self.engine, self.patience = db.engine, db.patience
        self.vectors = vectors

    def start_session(
        self,
        user_id: str,
        platform: str,
        session_key: str,
        *,
        session_id: str | None = None,
        chat_type: str = "dm",
        chat_id: str = "",
        thread_id: str | None = None,
        shared: bool = False,
        parent_session_id: str | None = None,
        system_prompt: str | None = None,
        started_at: datetime | None = None,
    ) -> ChatSession:
        now = started_at or utcnow()
        row = ChatSession(
            id=session_id or new_session_id(),
            session_key=session_key,
            user_id=validate_user_id(user_id),
            platform=platform,
            chat_type=chat_type,
            chat_id=chat_id,
            thread_id=thread_id,
            shared=shared,
            parent_session_id=parent_session_id,
            started_at=now,
            last_active_at=now,
        )

        def work(session: Session) -> ChatSession:
            if system_prompt is not None:
                row.system_prompt_hash = _store_prompt(session, system_prompt)
            session.add(row)
            return row

        # new rows only (the prompt kept once, whoever stores it first): no lock
        return eng.with_retry(self.engine, work, self.patience, keys=())

    def get_session(self, session_id: str, user_id: str) -> ChatSession | None:
        """The session if it belongs to `user_id`; another user's id gives None."""
        with eng.reading(self.engine) as session:
            row = session.get(ChatSession, session_id)
            return row if row is not None and row.user_id == user_id else None

    def sessions_of(self, owned: Sequence[tuple[str, str]]) -> dict[str, ChatSession]:
        """`get_session` for many (session id, user id) pairs in one read: by id, each
        session that exists and belongs to its pair's user."""
        if not owned:
            return {}
        wanted = dict(owned)
        with eng.reading(self.engine) as session:
            rows = session.exec(select(ChatSession).where(col(ChatSession.id).in_(wanted)))
            return {row.id: row for row in rows if row.user_id == wanted[row.id]}

    def turn_outcome(self, session_key: str, platform_message_id: str) -> TurnOutcome:
        """How far the turn of a platform message got, for a gateway taking over from
        one that died: "new" (not stored: answer it), "asked" (stored, not answered: the
        model call was in flight), "answered" (its own reply was stored: it was sent, or
        its sending's outcome is unknown; never sent twice). Its own reply is the first
        reply after it with no other message of the person in between: a reply to a
        later message (answered by another instance meanwhile) does not answer it.
        "unsent": its reply was stored and never handed to the platform (its instance
        stopped in between): the reply is sent as it is. A merged turn's stored id
        lists its messages' ids joined by ','."""
        recent = (
            select(Message.id, Message.session_id, Message.platform_message_id)
            .join(ChatSession, col(ChatSession.id) == col(Message.session_id))
            .where(
                ChatSession.session_key == session_key,
                Message.role == "user",
                col(Message.platform_message_id).is_not(None),
            )
            .order_by(col(Message.id).desc())
            .limit(50)
        )
        with eng.reading(self.engine) as session:
            for message_id, session_id, stored in session.exec(recent):
                if platform_message_id in str(stored).split(","):
                    following = (
                        select(Message.role, Message.delivery, Message.id, Message.content)
                        .where(
                            Message.session_id == session_id,
                            col(Message.id) > message_id,
                            or_(
                                col(Message.role) == "user",
                                and_(  # a reply, not a tool call
                                    col(Message.role) == "assistant",
                                    col(Message.tool_calls).is_(None),
                                ),
                            ),
                        )
                        .order_by(col(Message.id))
                        .limit(1)
                    )
                    found = session.exec(following).first()
                    if found is None or found[0] != "assistant":
                        return TurnOutcome("asked")
                    if found[1] == "stored":  # stored, never handed to the platform
                        return TurnOutcome("unsent", found[2], found[3])
                    return TurnOutcome("answered")
        return TurnOutcome("new")

    def session_taken(self, session_id: str) -> bool:
        """Whether any user has a session with this id (imports keep ids when free)."""
        with eng.reading(self.engine) as session:
            return session.get(ChatSession, session_id) is not None

    def latest_session(self, user_id: str) -> ChatSession | None:
        with eng.reading(self.engine) as session:
            query = (
                select(ChatSession)
                .where(ChatSession.user_id == user_id)
                .order_by(col(ChatSession.last_active_at).desc(), col(ChatSession.id).desc())
                .limit(1)
            )
            return session.exec(query).first()

    def session_for_key(
        self, user_id: str, session_key: str
    ) -> tuple[ChatSession | None, ChatSession | None]:
        """(the open session of this key, the latest ended one) for one user. The open
        one is the key's latest session only: an older one left open (a terminal chat
        closed without /new, which opens its own session per run) is never resumed once
        a newer session of the key has ended, or /new would fall back to it."""
        with eng.reading(self.engine) as session:
            query = (
                select(ChatSession)
                .where(ChatSession.user_id == user_id, ChatSession.session_key == session_key)
                .order_by(col(ChatSession.last_active_at).desc())
                .limit(20)
            )
            rows = list(session.exec(query))
        open_ = rows[0] if rows and rows[0].ended_at is None else None
        ended = next((r for r in rows if r.ended_at is not None), None)
        return open_, ended

    def list_sessions(
        self,
        user_id: str | None,
        platform: str | None = None,
        limit: int = 20,
        chat_id: str | None = None,
        *,
        among: list[str] | None = None,
        offset: int = 0,
    ) -> list[ChatSession]:
        """The most recent sessions of one user (None: of everyone, or of the users
        `among`), after the first `offset`."""
        with eng.reading(self.engine) as session:
            query = select(ChatSession)
            if user_id is not None:
                query = query.where(ChatSession.user_id == user_id)
            if among is not None:
                query = query.where(col(ChatSession.user_id).in_(among))
            if platform:
                query = query.where(ChatSession.platform == platform)
            if chat_id is not None:
                query = query.where(ChatSession.chat_id == chat_id)
            query = query.order_by(col(ChatSession.last_active_at).desc(), col(ChatSession.id))
            return list(session.exec(query.offset(offset).limit(limit)))

    def delete_session(self, session_id: str, user_id: str) -> bool:
        """Forget one session of `user_id` and its messages (their search index and
        vectors go with them); False when they have no such session. A message its
        gateway is storing at that moment fails; the person's next one starts anew."""

        def work(session: Session) -> bool:
            found = session.exec(
                select(ChatSession.id)
                .where(col(ChatSession.id) == session_id, col(ChatSession.user_id) == user_id)
                .with_for_update()
            ).first()
            if found is not None:
                drop_sessions(session, [session_id])
            return found is not None

        return eng.with_retry(self.engine, work, self.patience, keys=())

    def end_session(self, session_id: str, reason: str) -> None:
        def work(session: Session) -> None:
            session.execute(
                update(ChatSession)
                .where(col(ChatSession.id) == session_id, col(ChatSession.ended_at).is_(None))
                .values(ended_at=utcnow(), end_reason=reason)
            )

        eng.with_retry(self.engine, work, self.patience, keys=(f"session:{session_id}",))

    def system_prompt(self, prompt_hash: str) -> str | None:
        with eng.reading(self.engine) as session:
            row = session.get(SystemPrompt, prompt_hash)
            return row.text if row else None

    def add_messages(
        self,
        session_id: str,
        messages: Sequence[NewMessage],
        usage: Usage | None = None,
    ) -> list[int | None]:
        """Store messages in order; a redelivered platform message id gives None.

        `usage` adds the tokens of the model call that produced them, to the session
        and to its person's count for the day and the model (`usage_days`).
        """

        last = max((m.created_at for m in messages if m.created_at), default=None)
        active = eng.sql_time(last or utcnow())
        first_user = next((m.content for m in messages if m.role == "user" and m.content), "")
        title = _title(first_user) if first_user else ""
        prompt, completion, model = usage or (0, 0, "")
        day = today()

        def work(raw: eng.RawConnection) -> list[int | None]:
            # the hot path of every turn: plain SQL on the pooled sqlite3 connection
            # (building SQLAlchemy statements cost more than SQLite's work here)
            chat = raw.execute(_SESSION_ROW, (session_id,)).fetchone()
            if chat is None:
                raise eng.StateDBError(f"no session {session_id!r}")
            ids = [_insert_message(raw, session_id, chat, message) for message in messages]
            stored = sum(1 for i in ids if i is not None)
            if stored or usage:
                when = active if stored else _NEVER
                named = title if stored else ""
                row = (stored, when, when, named, named, prompt, completion, session_id)
                raw.execute(_TOUCH, row)
            if prompt or completion:
                raw.execute(ADD_USAGE, (day, chat[0], model, prompt, completion))
            return ids

        def one(raw: eng.RawConnection) -> list[int | None]:
            # PostgreSQL, one message (each turn's question and its answer): the same
            # three steps as one statement, its own transaction (one round trip, not six)
            touch = (active, active, title, title, prompt, completion, session_id, bool(usage))
            used = (day, model, prompt, completion, bool(prompt or completion))
            values = (session_id, *_message_values(messages[0]), *touch, *used)
            found, new_id = raw.execute(_ADD_ONE, values).fetchone()
            if not found:
                raise eng.StateDBError(f"no session {session_id!r}")
            return [None if new_id is None else int(new_id)]

        if len(messages) == 1 and self.engine.dialect.name == "postgresql":
            return eng.with_raw_retry(self.engine, one, self.patience, begin="SINGLE")
        # each statement settles beside others: a new key, or counters updated in place
        return eng.with_raw_retry(self.engine, work, self.patience, begin="APPEND")

    def add_message(self, session_id: str, message: NewMessage) -> int | None:
        return self.add_messages(session_id, [message])[0]

    def set_delivery(self, message_id: int, state: str) -> None:
        """Where a stored reply is on its way: "sending" before it is handed to the
        platform, then "sent", "unknown" or "failed" (Message.delivery)."""
        eng.with_raw_retry(
            self.engine,
            lambda raw: raw.execute(_SET_DELIVERY, (state, message_id)),
            self.patience,
            begin="SINGLE",
        )

    def messages(self, session_id: str, user_id: str) -> list[Message]:
        if self.get_session(session_id, user_id) is None:
            return []
        with eng.reading(self.engine) as session:
            query = (
                select(Message).where(Message.session_id == session_id).order_by(col(Message.id))
            )
            return list(session.exec(query))

    def message(self, message_id: int, user_id: str) -> Message | None:
        with eng.reading(self.engine) as session:
            row = session.get(Message, message_id)
            return row if row is not None and row.user_id == user_id else None

    def count_messages(self) -> int:
        with eng.reading(self.engine) as session:
            return int(session.exec(select(func.count()).select_from(Message)).one())

    def activity(self, since: datetime) -> Activity:
        """For the operator (across people, no text): each platform's last message in
        and reply out, and messages received per hour since `since`."""
        hour = (
            func.to_char(Message.created_at, "YYYY-MM-DD HH24")
            if self.engine.dialect.name == "postgresql"
            else func.strftime("%Y-%m-%d %H", Message.created_at)
        )
        with eng.reading(self.engine) as session:
            last = session.execute(
                select(ChatSession.platform, Message.role, func.max(Message.created_at))
                .join(ChatSession, col(ChatSession.id) == col(Message.session_id))
                .where(col(Message.role).in_(("user", "assistant")))
                .group_by(ChatSession.platform, Message.role)
            ).all()
            hours = session.execute(
                select(hour, func.count())
                .where(Message.role == "user", col(Message.created_at) >= since)
                .group_by(hour)
            ).all()
        received: dict[str, datetime] = {}
        replied: dict[str, datetime] = {}
        for platform, role, at in last:
            (received if role == "user" else replied)[str(platform)] = as_utc(at)
        return Activity(received, replied, {str(h): int(n) for h, n in hours})

    def search(
        self,
        scope: SearchScope,
        query: str,
        limit: int = 50,
        vector: QueryVector | None = None,
        ranking: Ranking = RANKING,
    ) -> list[MessageHit]:
        """The user's best messages for `query`; with `vector` (the query's embedding),
        the nearest of the user's own messages are fused with the word ranking.
        `ranking`: the default, or steps switched off for the benchmarks' ablations."""
        if self.engine.dialect.name == "postgresql":
            with eng.reading(self.engine) as session:
                conn = session.connection()
                # what was written since the last search is indexed first (asked inside
                # this snapshot: nothing newer than what it sees can be missing)
                if not _backlog_waiting(conn):
                    return self._search_in(
                        conn, scope=scope, query=query, limit=limit, vector=vector, ranking=ranking
                    )

            postgres.index_backlog(self.engine)
        with eng.reading(self.engine) as session:
            conn = session.connection()
            return self._search_in(
                conn, scope=scope, query=query, limit=limit, vector=vector, ranking=ranking
            )

    def search_people(
        self, user_ids: Sequence[str], query: str, limit: int, vector: QueryVector | None = None
    ) -> dict[str, list[MessageHit]]:
        """Each of these people's own search for `query` (as `search` ranks it, with
        their own statistics), for a page across people: only the people with a match
        are searched (`people_matching`), in one snapshot; on PostgreSQL over a few
        pooled connections at once (each search is a few round trips, so a hundred
        people one after another wait mostly on the network)."""
        wanted = sorted(self.people_matching(query, list(user_ids)))
        if not wanted:
            return {}

        def some(group: list[str]) -> dict[str, list[MessageHit]]:
            with eng.reading(self.engine) as session:
                conn = session.connection()
                return {
                    user_id: self._search_in(
                        conn, scope=SearchScope(user_id), query=query, limit=limit, vector=vector
                    )
                    for user_id in group
                }

        if self.engine.dialect.name != "postgresql" or len(wanted) < 2 * SEARCH_THREADS:
            return some(wanted)
        groups = [wanted[i::SEARCH_THREADS] for i in range(SEARCH_THREADS)]
        with ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="search") as pool:
            found: dict[str, list[MessageHit]] = {}
            for part in pool.map(some, groups):
                found |= part
        return found

    def people_matching(self, query: str, user_ids: list[str]) -> set[str]:
        """Which of these people have any message matching `query` (search.py's
        `people_with_matches`): a search across people ranks only theirs."""
        if self.engine.dialect.name == "postgresql":
            postgres.index_backlog(self.engine)  # what was written since is findable too
        with eng.reading(self.engine) as session:
            return people_with_matches(session.connection(), query, user_ids)

    def _search_in(
        self,
        conn: Any,
        *,
        scope: SearchScope,
        query: str,
        limit: int,
        vector: QueryVector | None,
        ranking: Ranking = RANKING,
    ) -> list[MessageHit]:
        nearest = None
        if vector is not None and self.vectors is not None:
            nearest = self.vectors.nearest(conn, scope.user_id, vector)
        return search_messages(conn, scope, query, limit, nearest=nearest, ranking=ranking)

    def idle_sessions(self, idle_for: timedelta) -> list[ChatSession]:
        """Open sessions without a message for longer than `idle_for` (all users)."""
        cutoff = utcnow() - idle_for
        with eng.reading(self.engine) as session:
            query = select(ChatSession).where(
                col(ChatSession.ended_at).is_(None), col(ChatSession.last_active_at) < cutoff
            )
            return list(session.exec(query))

    def add_media(self, rows: list[Media]) -> None:
        """Files that came with a message of a session (stored by reference)."""
        if not rows:
            return

        def work(session: Session) -> None:
            session.add_all(rows)

        eng.with_retry(self.engine, work, self.patience, keys=())  # new rows only

    def media(self, session_id: str, user_id: str) -> list[Media]:
        with eng.reading(self.engine) as session:
            query = (
                select(Media)
                .where(Media.session_id == session_id, Media.user_id == user_id)
                .order_by(col(Media.id))
            )
            return list(session.exec(query))

    def media_paths(self) -> set[str]:
        """Every media file some row still refers to (the rest may be deleted)."""
        with eng.reading(self.engine) as session:
            return set(session.exec(select(Media.path).distinct()))

    # -- media bytes on a database server (any machine reads what arrived on another) ----

    @property
    def media_in_database(self) -> bool:
        """Whether a file's bytes are kept here (PostgreSQL) rather than under media/."""
        return self.engine.dialect.name == "postgresql"

    def put_media_bytes(self, path: str, data: bytes) -> None:
        """Keep `data` as the file `path` names (media/<sha256><ext>: the same bytes
        always, so a second copy is never written)."""
        sql = (
            "INSERT INTO media_blobs(path, data, created_at) VALUES (:p, :d, :t) "
            "ON CONFLICT (path) DO NOTHING"
        )
        params = {"p": path, "d": data, "t": eng.sql_time(utcnow())}
        eng.with_retry(  # a new row (the same bytes when it is there): no lock to wait for
            self.engine, lambda s: s.connection().execute(text(sql), params), self.patience, keys=()
        )

    def media_bytes(self, path: str) -> bytes | None:
        with eng.reading(self.engine) as session:
            sql = text("SELECT data FROM media_blobs WHERE path = :p")
            row = session.connection().execute(sql, {"p": path}).first()
        return bytes(row[0]) if row is not None else None

    def drop_unreferenced_media_bytes(self) -> int:
        """Delete the bytes no media row refers to any more (their sessions were pruned).
        Bytes stored in the last hour are kept: a file arriving now is stored before the
        row that refers to it."""
        sql = text(
            "DELETE FROM media_blobs WHERE created_at < :before "
            "AND path NOT IN (SELECT path FROM media)"
        )
        before = {"before": eng.sql_time(utcnow() - MEDIA_SETTLE)}
        return int(
            eng.with_retry(
                self.engine,
                lambda s: s.connection().execute(sql, before).rowcount,
                self.patience,
                keys=(),
            )
        )

    def record_delivery(
        self,
        message_id: int | None,
        platform: str,
        chat_id: str,
        *,
        ok: bool,
        attempts: int,
        error: str | None = None,
    ) -> None:
        def work(session: Session) -> None:
            session.add(
                Delivery(
                    message_id=message_id,
                    platform=platform,
                    chat_id=chat_id,
                    status="sent" if ok else "failed",
                    attempts=attempts,
                    error=error,
                )
            )

        eng.with_retry(self.engine, work, self.patience, keys=())  # a new row

    def failed_deliveries(self, platform: str | None = None) -> list[Delivery]:
        with eng.reading(self.engine) as session:
            query = select(Delivery).where(Delivery.status == "failed")
            if platform:
                query = query.where(Delivery.platform == platform)
            return list(session.exec(query.order_by(col(Delivery.id))))


def _store_prompt(session: Session, text: str) -> str:
    """The prompt kept once by its hash (two sessions starting at once with the same
    prompt, on PostgreSQL side by side: the second insert settles on the first)."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if session.get(SystemPrompt, digest) is None:
        now = eng.sql_time(utcnow())
        session.execute(_KEEP_PROMPT, {"hash": digest, "text": text, "now": now})
    return digest


_KEEP_PROMPT = text(
    "INSERT INTO system_prompts (hash, text, created_at) VALUES (:hash, :text, :now) "
    "ON CONFLICT DO NOTHING"
)


_SESSION_ROW = "SELECT user_id, platform FROM sessions WHERE id = ?"


_INSERT_MESSAGE = (
    "INSERT INTO messages (session_id, user_id, platform, role, content, tool_calls, "
    "tool_call_id, tool_name, platform_message_id, token_count, created_at, delivery) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id"
)
_SET_DELIVERY = "UPDATE messages SET delivery = ? WHERE id = ?"

# PostgreSQL: `_SESSION_ROW`, `_INSERT_MESSAGE` and `_TOUCH` of one message in one
# statement (whether the session exists, the new id or NULL when it was stored already)
_ADD_ONE = (
    "WITH chat AS (SELECT id, user_id, platform FROM sessions WHERE id = ?), "
    "new AS (INSERT INTO messages (session_id, user_id, platform, role, content, "
    "tool_calls, tool_call_id, tool_name, platform_message_id, token_count, created_at, "
    "delivery) SELECT id, user_id, platform, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM chat "
    "ON CONFLICT DO NOTHING RETURNING id), "
    "touched AS (UPDATE sessions SET message_count = message_count + (SELECT count(*) FROM new), "
    "last_active_at = CASE WHEN EXISTS (SELECT 1 FROM new) AND ? > last_active_at "
    "THEN ? ELSE last_active_at END, "
    "title = CASE WHEN title = '' AND EXISTS (SELECT 1 FROM new) AND ? <> '' "
    "THEN ? ELSE title END, "
    "prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ? "
    "WHERE id = ? AND (? OR EXISTS (SELECT 1 FROM new))), "
    + ADD_USAGE_STEP
    + " SELECT EXISTS (SELECT 1 FROM chat), (SELECT id FROM new)"
)


# in words both backends read alike (each value given as often as it is used)
_TOUCH = (
    "UPDATE sessions SET message_count = message_count + ?, "
    "last_active_at = CASE WHEN ? > last_active_at THEN ? ELSE last_active_at END, "
    "title = CASE WHEN title = '' AND ? <> '' THEN ? ELSE title END, "
    "prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ? "
    "WHERE id = ?"
)
_NEVER = "0001-01-01 00:00:00.000000"  # a time no session is older than


def _backlog_waiting(conn: Any) -> bool:
    return bool(conn.execute(text("SELECT EXISTS (SELECT 1 FROM search_backlog)")).scalar())


def _insert_message(
    raw: eng.RawConnection, session_id: str, chat: tuple[str, str], message: NewMessage
) -> int | None:
    """The new row's id, or None when the platform message id was stored already."""
    cursor = raw.execute(_INSERT_MESSAGE, (session_id, *chat, *_message_values(message)))
    row = cursor.fetchone()
    return int(row[0]) if row is not None else None


def _message_values(message: NewMessage) -> tuple[Any, ...]:
    """A new message's columns after its session's (id, person, platform), in the order
    `_INSERT_MESSAGE` and `_ADD_ONE` name them."""
    tool_calls = json.dumps(message.tool_calls, ensure_ascii=False) if message.tool_calls else None
    return (
        message.role,
        message.content,
        tool_calls,
        message.tool_call_id,
        message.tool_name,
        message.platform_message_id,
        message.token_count,
        eng.sql_time(message.created_at or utcnow()),
        message.delivery,
    )


def _title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"
