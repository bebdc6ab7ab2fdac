"""Several gateway processes on one PostgreSQL database: the rows that coordinate them.

PostgreSQL is the only coordinator (no broker, no lock service). Four tables (schema
16, PostgreSQL only: `_V16_CLUSTER` in hermes/state/postgres.py; a SQLite home keeps
its one-process lock):

- `gateway_instances`: each running gateway's id, host, pid and heartbeat, and what it
  holds (platforms, sessions), for `hermes gateway status` and `/admin status`;
- `leases`: a name (`session:<key>`, `leader`, `platform:discord`), its holder and an
  expiry. A lease is a row, not a session-level advisory lock, so it works through
  connection poolers, outlives no holder (it expires) and can be listed. Taken with
  one `INSERT … ON CONFLICT DO UPDATE … WHERE` (free, expired, or already ours),
  renewed for every lease of a holder in one statement with its heartbeat. A session's
  lease is released by expiring it at once ('-infinity'), not deleted: its row keeps
  its last holder, which then knows that nobody worked the session since;
- `inbound_seen`: every platform event's own ids (`e:<delivery id>`, `m:<message id>`),
  recorded in the statement that queues it (or right before an action that leaves no
  row: a button press, /stop, a pairing reply): a delivery that reaches two instances,
  or a platform's redelivery, is acted on once (pruned after `SEEN_DAYS`);
- `inbox`: the events of a session waiting for a turn, in sent order, until the turn
  that worked them has ended. Taken by the session lease's holder; a row that a dead
  holder had taken (`taken_by` set, its lease expired) is taken again by the next
  holder, which checks the conversation before answering it (never twice).

Every method is one statement in autocommit (one round trip): a message's hot path pays
for `enqueue` and `finish`, nothing else. None takes a lock of the repositories' writes
(hermes/state/postgres.py): rows and their unique keys settle every race here.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from hermes import metrics
from hermes.state import engine as eng
from hermes.state import postgres

SEEN_DAYS = 7  # a platform redelivers within minutes (Slack), hours at most
INBOX_CHANNEL = "hermes_inbox"  # payload: "<holder id> <session key>": wake that holder
STOP_CHANNEL = "hermes_stop"  # payload: "<holder id> <session key>": stop its running turn
ANYONE = "*"  # an inbox wake-up for every instance: a session let go by one that stops


@dataclass(frozen=True, slots=True)
class Queued:
    """An inbox row handed to the holder of its session's lease."""

    id: int
    session_key: str
    sent_at: float
    seq: int  # ties in sent_at: the platform's order within the chat
    event: dict[str, Any]
    interrupted: bool  # a holder had taken it and died (or stopped) before its turn ended


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: int
    held: bool  # this instance holds the session's lease: it works the row now
    waiting: int  # rows of the session queued before this one and not taken
    prior: str | None  # who held the session's lease last (its conversation is current)


@dataclass(frozen=True, slots=True)
class Instance:
    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
    info: dict[str, Any]
    leases: tuple[str, ...]
    alive: bool


def session_lease(key: str) -> str:
    return f"session:{key}"


_TAKE_LEASE = (
    "INSERT INTO leases(name, holder, expires_at) "
    "VALUES (%(name)s, %(me)s, now() + make_interval(secs => %(ttl)s::float8)) "
    "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
    "expires_at = excluded.expires_at, "
    "acquired_at = CASE WHEN leases.holder = excluded.holder THEN leases.acquired_at "
    "ELSE now() END "
    "WHERE leases.holder = excluded.holder OR leases.expires_at < now() "
    "RETURNING name"
)

_ENQUEUE = (
    "WITH seen AS (INSERT INTO inbound_seen(platform, key) "
    "SELECT %(platform)s, unnest(%(keys)s::text[]) ON CONFLICT DO NOTHING RETURNING 1), "
    "new AS (SELECT (SELECT count(*) FROM seen) = %(nkeys)s AS yes), "
    "prior AS (SELECT holder FROM leases WHERE name = %(name)s), "
    "lease AS ("
    + _TAKE_LEASE.replace(
        "VALUES (%(name)s, %(me)s, now() + make_interval(secs => %(ttl)s::float8))",
        "SELECT %(name)s, %(me)s, now() + make_interval(secs => %(ttl)s::float8) "
        "WHERE (SELECT yes FROM new)",
    )
    + "), "
    "earlier AS (SELECT count(*) AS n FROM inbox WHERE session_key = %(key)s "
    "AND (state = 'queued' OR taken_by <> %(me)s)), "
    "row AS (INSERT INTO inbox(session_key, platform, sent_at, seq, event, state, taken_by) "
    "SELECT %(key)s, %(platform)s, %(sent_at)s::float8, %(seq)s::bigint, %(event)s::jsonb, "
    "CASE WHEN EXISTS (SELECT 1 FROM lease) THEN 'taken' ELSE 'queued' END, "
    "CASE WHEN EXISTS (SELECT 1 FROM lease) THEN %(me)s END WHERE (SELECT yes FROM new) "
    "RETURNING id, state), "
    "wake AS (SELECT pg_notify('" + INBOX_CHANNEL + "', l.holder || ' ' || %(key)s) "
    "FROM leases l WHERE l.name = %(name)s AND (SELECT yes FROM new) "
    "AND NOT EXISTS (SELECT 1 FROM lease)) "
    "SELECT row.id, row.state = 'taken', (SELECT n FROM earlier), "
    "(SELECT count(*) FROM wake), (SELECT holder FROM prior) FROM row"
)

_CLAIM = (
    "WITH lease AS ("
    + _TAKE_LEASE.replace(
        "VALUES (%(name)s, %(me)s, now() + make_interval(secs => %(ttl)s::float8))",
        "SELECT %(name)s, %(me)s, now() + make_interval(secs => %(ttl)s::float8) WHERE EXISTS "
        "(SELECT 1 FROM inbox WHERE session_key = %(key)s "
        "AND (state = 'queued' OR taken_by <> %(me)s))",
    )
    + ") "
    "UPDATE inbox SET state = 'taken', taken_by = %(me)s, "
    "interrupted = interrupted OR taken_by IS NOT NULL "
    "WHERE session_key = %(key)s AND EXISTS (SELECT 1 FROM lease) "
    "AND (state = 'queued' OR taken_by <> %(me)s) "
    "RETURNING id, session_key, sent_at, seq, event, interrupted"
)

_FINISH = (
    "WITH gone AS (DELETE FROM inbox WHERE id = ANY(%(ids)s::bigint[]) AND taken_by = %(me)s "
    "RETURNING id), "
    "waiting AS (SELECT count(*) AS n FROM inbox WHERE session_key = %(key)s "
    "AND NOT (id = ANY(%(ids)s::bigint[])) AND (state = 'queued' OR taken_by <> %(me)s)), "
    "freed AS (UPDATE leases SET expires_at = '-infinity' WHERE name = %(name)s "
    "AND holder = %(me)s AND %(release)s::boolean AND (SELECT n FROM waiting) = 0 "
    "AND NOT EXISTS (SELECT 1 FROM inbox WHERE session_key = %(key)s "
    "AND NOT (id = ANY(%(ids)s::bigint[]))) RETURNING 1) "
    "SELECT (SELECT n FROM waiting), EXISTS (SELECT 1 FROM freed)"
)

# a stopping instance's session: its finished rows removed, the rows it gives back
# queued again for the next holder (as they were: not interrupted, no turn ran for
# them), and, with `release`, its lease freed (unless it still holds other rows of the
# session: being read into its lane) and every instance woken to take what waits
_LET_GO = (
    "WITH gone AS (DELETE FROM inbox WHERE id = ANY(%(done)s::bigint[]) AND taken_by = %(me)s "
    "RETURNING id), "
    "back AS (UPDATE inbox SET state = 'queued', taken_by = NULL "
    "WHERE id = ANY(%(back)s::bigint[]) AND taken_by = %(me)s RETURNING id), "
    "freed AS (DELETE FROM leases WHERE name = %(name)s AND holder = %(me)s "
    "AND %(release)s::boolean AND NOT EXISTS (SELECT 1 FROM inbox WHERE session_key = %(key)s "
    "AND taken_by = %(me)s AND NOT (id = ANY(%(done)s::bigint[])) "
    "AND NOT (id = ANY(%(back)s::bigint[]))) RETURNING 1), "
    "wake AS (SELECT pg_notify('" + INBOX_CHANNEL + "', '" + ANYONE + " ' || %(key)s) "
    "WHERE EXISTS (SELECT 1 FROM freed) AND (EXISTS (SELECT 1 FROM back) OR EXISTS "
    "(SELECT 1 FROM inbox WHERE session_key = %(key)s AND NOT (id = ANY(%(done)s::bigint[])) "
    "AND (state = 'queued' OR taken_by <> %(me)s)))) "
    "SELECT (SELECT count(*) FROM back), (SELECT count(*) FROM wake)"
)

_RENEW = (
    "WITH beat AS (UPDATE gateway_instances SET heartbeat_at = now(), info = %(info)s::jsonb "
    "WHERE id = %(me)s RETURNING 1) "
    "UPDATE leases SET expires_at = now() + make_interval(secs => %(ttl)s::float8) "
    "WHERE holder = %(me)s AND expires_at > '-infinity' RETURNING name"
)

_ORPHANED = (
    "SELECT DISTINCT i.session_key FROM inbox i "
    "WHERE i.platform = ANY(%(platforms)s::text[]) "
    "AND (i.state = 'queued' OR i.taken_by <> %(me)s) "
    "AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.name = 'session:' || i.session_key "
    "AND l.expires_at >= now()) LIMIT %(limit)s"
)


class ClusterDB:
    """The coordination rows of several gateways (PostgreSQL only)."""

    def __init__(self, db: eng.Handle, threads: int = 2) -> None:
        """`threads`: how many may ask at once (the database executor's threads and the
        heartbeat's), the connections its pool keeps."""
        self.engine: Engine = db.engine
        self.threads = threads
        self._auto: Engine | None = None  # made on first use (PostgreSQL only)
        self._making = threading.Lock()  # the database executor's threads ask at once

    def _connection(self) -> Engine:
        """An engine of its own (the coordination never waits behind long writes for a
        connection): autocommit (each statement its own transaction), a connection kept
        for each thread that may ask at once (a pool smaller than that opened and closed
        a connection, a server process each, for a fifth of the messages), no check
        before each use (a round trip on every statement of the hot path): a connection
        found dropped is retried once instead. Made once: two made at once, the one
        dropped would leave its connection open."""
        with self._making:
            if self._auto is None:
                url = self.engine.url.render_as_string(hide_password=False)
                own = postgres.open_engine(url, self.threads, pre_ping=False)
                self._auto = own.execution_options(isolation_level="AUTOCOMMIT")
            return self._auto

    def close(self) -> None:
        with self._making:
            if self._auto is not None:
                self._auto.dispose()
                self._auto = None

    def _run(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        metrics.CLUSTER_STATEMENTS.inc()
        with eng.explained(self.engine):
            for attempt in (1, 2):
                try:
                    with self._connection().connect() as conn:
                        return [tuple(row) for row in conn.exec_driver_sql(sql, params)]
                except DBAPIError as exc:
                    if attempt == 2 or not exc.connection_invalidated:
                        raise
        raise AssertionError("unreachable")

    def _one(self, sql: str, params: dict[str, Any]) -> Sequence[Any] | None:
        rows = self._run(sql, params)
        return rows[0] if rows else None

    def _all(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        return self._run(sql, params)

    # -- instances -------------------------------------------------------------------------

    def register(self, me: str, host: str, pid: int, info: dict[str, Any]) -> None:
        self._one(
            "INSERT INTO gateway_instances(id, host, pid, info) VALUES "
            "(%(me)s, %(host)s, %(pid)s, %(info)s::jsonb) RETURNING 1",
            {"me": me, "host": host, "pid": pid, "info": json.dumps(info)},
        )

    def renew(self, me: str, ttl: float, info: dict[str, Any]) -> set[str]:
        """The heartbeat: `me`'s row stamped, every lease it still holds extended by
        `ttl`; the names of those leases. A lease is lost only when another instance
        took it (after it expired): one renewed late that nobody took is still ours."""
        rows = self._all(_RENEW, {"me": me, "ttl": ttl, "info": json.dumps(info)})
        return {str(name) for (name,) in rows}

    def retire(self, me: str) -> None:
        """A clean stop: rows taken but not worked go back to the queue (the next holder
        checks them as interrupted), every lease is freed at once, every instance is
        woken for the sessions given back, the row says stopped."""
        self._one(
            "WITH back AS (UPDATE inbox SET state = 'queued', taken_by = NULL, "
            "interrupted = true WHERE taken_by = %(me)s RETURNING session_key), "
            "freed AS (DELETE FROM leases WHERE holder = %(me)s RETURNING 1), "
            "wake AS (SELECT pg_notify('" + INBOX_CHANNEL + "', '" + ANYONE + " ' || k) "
            "FROM (SELECT DISTINCT session_key AS k FROM back) keys) "
            "UPDATE gateway_instances SET stopped_at = now() WHERE id = %(me)s RETURNING "
            "(SELECT count(*) FROM back), (SELECT count(*) FROM wake)",
            {"me": me},
        )

    def let_go(
        self,
        me: str,
        key: str,
        *,
        finished: Sequence[int] = (),
        returned: Sequence[int] = (),
        release: bool = True,
    ) -> int:
        """A stopping instance's session (see `_LET_GO`): `finished` rows removed,
        `returned` rows queued again, with `release` the lease freed and every instance
        woken for what waits; how many rows went back."""
        row = self._one(
            _LET_GO,
            {
                "me": me,
                "key": key,
                "name": session_lease(key),
                "done": list(finished),
                "back": list(returned),
                "release": release,
            },
        )
        return int(row[0]) if row else 0

    def hand_back(self, me: str, platform: str) -> int:
        """`me` lost `platform`'s connection: the rows of that platform it had taken go
        back to the queue (interrupted: checked before they are answered) and their
        sessions' leases are freed; how many rows."""
        rows = self._all(
            "WITH back AS (UPDATE inbox SET state = 'queued', taken_by = NULL, "
            "interrupted = true WHERE taken_by = %(me)s AND platform = %(platform)s "
            "RETURNING session_key), "
            "freed AS (DELETE FROM leases WHERE holder = %(me)s AND name IN "
            "(SELECT 'session:' || session_key FROM back) RETURNING 1) "
            "SELECT 1 FROM back",
            {"me": me, "platform": platform},
        )
        return len(rows)

    def instances(self, ttl: float, *, include_stopped_hours: float = 1.0) -> list[Instance]:
        """Every instance that ran lately: alive when its heartbeat is within `ttl`."""
        rows = self._all(
            "SELECT g.id, g.host, g.pid, g.started_at, g.heartbeat_at, g.stopped_at, g.info, "
            "coalesce((SELECT array_agg(l.name ORDER BY l.name) FROM leases l "
            "WHERE l.holder = g.id AND l.expires_at >= now()), '{}'), "
            "g.stopped_at IS NULL "
            "AND g.heartbeat_at >= now() - make_interval(secs => %(ttl)s::float8) "
            "FROM gateway_instances g WHERE g.stopped_at IS NULL "
            "OR g.stopped_at >= now() - make_interval(secs => %(hours)s::float8 * 3600) "
            "ORDER BY g.started_at",
            {"ttl": ttl, "hours": include_stopped_hours},
        )
        return [
            Instance(
                str(r[0]), str(r[1]), int(r[2]), r[3], r[4], r[5], dict(r[6]), tuple(r[7]), r[8]
            )
            for r in rows
        ]

    def others_alive(self, me: str, ttl: float) -> list[str]:
        """The ids of other instances whose heartbeat is within `ttl`."""
        rows = self._all(
            "SELECT id FROM gateway_instances WHERE id <> %(me)s AND stopped_at IS NULL "
            "AND heartbeat_at >= now() - make_interval(secs => %(ttl)s::float8)",
            {"me": me, "ttl": ttl},
        )
        return [str(r[0]) for r in rows]

    # -- leases ----------------------------------------------------------------------------

    def acquire(self, name: str, me: str, ttl: float) -> bool:
        """Take (or keep) the lease `name` for `ttl` s: free, expired or already ours."""
        return self._one(_TAKE_LEASE, {"name": name, "me": me, "ttl": ttl}) is not None

    def release(self, name: str, me: str) -> None:
        self._one(
            "DELETE FROM leases WHERE name = %(name)s AND holder = %(me)s RETURNING 1",
            {"name": name, "me": me},
        )

    def holder(self, name: str) -> str | None:
        """Who holds `name` now (None: nobody, or its holder let it expire)."""
        row = self._one(
            "SELECT holder FROM leases WHERE name = %(name)s AND expires_at >= now()",
            {"name": name},
        )
        return str(row[0]) if row is not None else None

    # -- inbound events --------------------------------------------------------------------

    def seen(self, platform: str, keys: Sequence[str]) -> bool:
        """Record the event's ids; False when any was recorded before (a redelivery, or
        the same delivery at another instance): then it must not be acted on."""
        rows = self._all(
            "INSERT INTO inbound_seen(platform, key) SELECT %(platform)s, unnest(%(keys)s::text[]) "
            "ON CONFLICT DO NOTHING RETURNING 1",
            {"platform": platform, "keys": list(keys)},
        )
        return len(rows) == len(set(keys))

    def prune(self, days: int = SEEN_DAYS) -> int:
        """Forget event ids, released leases and stopped instances older than `days`;
        how many rows."""
        rows = self._all(
            "WITH seen AS (DELETE FROM inbound_seen WHERE seen_at < now() - "
            "make_interval(days => %(days)s::int) RETURNING 1), "
            "leases AS (DELETE FROM leases WHERE expires_at < now() - "
            "make_interval(days => %(days)s::int) RETURNING 1), "
            "gone AS (DELETE FROM gateway_instances WHERE heartbeat_at < now() - "
            "make_interval(days => %(days)s::int) RETURNING 1) "
            "SELECT (SELECT count(*) FROM seen) + (SELECT count(*) FROM leases) "
            "+ (SELECT count(*) FROM gone)",
            {"days": days},
        )
        return int(rows[0][0]) if rows else 0

    def enqueue(
        self,
        me: str,
        key: str,
        *,
        platform: str,
        ids: Sequence[str],
        sent_at: float,
        event: dict[str, Any],
        ttl: float,
        seq: int = 0,
    ) -> Enqueued | None:
        """Record the event's own `ids` and, in the same statement, queue it for session
        `key` and take the session's lease if it is free: `held` says this instance works
        it now (the row is taken by it); otherwise the lease's holder is woken (NOTIFY)
        and takes it in sent order. None: an id was recorded before (a redelivery, or
        the same delivery at another instance): nothing is queued. A process that dies
        before this statement leaves nothing recorded: the platform's redelivery is
        taken then."""
        row = self._one(
            _ENQUEUE,
            {
                "me": me,
                "key": key,
                "name": session_lease(key),
                "platform": platform,
                "keys": list(ids),
                "nkeys": len(set(ids)),
                "sent_at": sent_at,
                "seq": seq,
                "event": json.dumps(event),
                "ttl": ttl,
            },
        )
        if row is None:
            return None
        return Enqueued(int(row[0]), bool(row[1]), int(row[2]), row[4])

    def claim(self, me: str, key: str, ttl: float) -> list[Queued]:
        """Take session `key`'s lease (free, expired or ours) and every row waiting in
        its queue, in sent order; [] when the lease is another's or nothing waits."""
        rows = self._all(_CLAIM, {"me": me, "key": key, "name": session_lease(key), "ttl": ttl})
        queued = [
            Queued(int(r[0]), str(r[1]), float(r[2]), int(r[3]), dict(r[4]), bool(r[5]))
            for r in rows
        ]
        return sorted(queued, key=lambda q: (q.sent_at, q.seq, q.id))

    def finish(self, me: str, key: str, ids: Sequence[int], *, release: bool) -> tuple[int, bool]:
        """Rows whose turn ended are removed; with `release`, the session's lease is
        freed unless rows wait, or `me` holds others of the session (taken, still being
        read into its lane: let go now, another instance would take them as
        interrupted and answer them a second time). (rows waiting, whether the lease
        was freed)."""
        row = self._one(
            _FINISH,
            {
                "me": me,
                "key": key,
                "name": session_lease(key),
                "ids": list(ids),
                "release": release,
            },
        )
        assert row is not None
        return int(row[0]), bool(row[1])

    def orphaned(self, me: str, platforms: Sequence[str], limit: int = 50) -> list[str]:
        """Session keys on these platforms with rows waiting and nobody holding them (the
        wake-up was lost, or the holder died): whoever finds them claims them."""
        rows = self._all(_ORPHANED, {"me": me, "platforms": list(platforms), "limit": limit})
        return [str(r[0]) for r in rows]

    def stranded(self, older_than_s: float) -> int:
        """Events waiting longer than `older_than_s` with nobody holding their session
        (no instance serves their platform, or none is running)."""
        row = self._one(
            "SELECT count(*) FROM inbox i WHERE i.received_at < now() - "
            "make_interval(secs => %(age)s::float8) AND NOT EXISTS (SELECT 1 FROM leases l "
            "WHERE l.name = 'session:' || i.session_key AND l.expires_at >= now())",
            {"age": older_than_s},
        )
        return int(row[0]) if row else 0

    def notify(self, channel: str, payload: str) -> None:
        self._one(
            "SELECT pg_notify(%(channel)s, %(payload)s)", {"channel": channel, "payload": payload}
        )

    def waiting(self) -> int:
        row = self._one("SELECT count(*) FROM inbox", {})
        return int(row[0]) if row else 0

    def stop_turn(self, key: str) -> str | None:
        """Ask the holder of session `key`'s lease to stop its running turn; its id, or
        None when nobody holds it."""
        row = self._one(
            "SELECT holder, pg_notify('" + STOP_CHANNEL + "', holder || ' ' || %(key)s) "
            "FROM leases "
            "WHERE name = %(name)s AND expires_at >= now()",
            {"key": key, "name": session_lease(key)},
        )
        return str(row[0]) if row is not None else None

    # -- wake-ups ----------------------------------------------------------------------------

    async def notifications(
        self, channels: Sequence[str], listening: asyncio.Event | None = None
    ) -> AsyncGenerator[tuple[str, str], None]:
        """(channel, payload) of every NOTIFY on `channels`, on a connection of its own
        (LISTEN needs one that stays open; a pooler in transaction mode drops them, so the
        callers also poll). `listening` is set once every LISTEN is in place."""
        import psycopg  # noqa: PLC0415 - PostgreSQL only (the postgres extra)

        url = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for channel in channels:
                await conn.execute(f"LISTEN {channel}")
            if listening is not None:
                listening.set()
            async for note in conn.notifies():
                yield note.channel, note.payload


__all__ = [
    "ANYONE",
    "INBOX_CHANNEL",
    "STOP_CHANNEL",
    "ClusterDB",
    "Enqueued",
    "Instance",
    "Queued",
    "session_lease",
]
