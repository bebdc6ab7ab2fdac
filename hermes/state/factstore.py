"""The holographic provider's fact store: its own SQLite file ($HERMES_HOME/holographic.db,
WAL, 0600), or, when the home's state is on PostgreSQL, tables of that database
(`holographic_facts`, ...); every row and every query confined to one person.

Tables: `facts` (text, category, trust, where it came from, feedback counts), `entities`
and `fact_entities` (names found in the text by rules, foreign keys cascading), and the
words index: on SQLite `facts_fts`, a contentless FTS5 index of each fact's words and
CJK terms (hermes/state/cjk.py) with the person's scope token, so a search reads only
their postings; on PostgreSQL a `tsvector` column of the folded words (the `simple`
configuration, as state.db's search) with a GIN index, searched within the person's
rows. The provider (hermes/providers/holographic.py) ranks the candidates; this module
only stores and finds them, with the same methods on both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hermes.state.engine import RawConnection
from hermes.state.search import fold
from hermes.state.sidecar import (
    ServerSidecar,
    SidecarDB,
    match_query,
    now,
    scope_token,
    server_for,
)

FILENAME = "holographic.db"

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS facts (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        content TEXT NOT NULL,
        body TEXT NOT NULL DEFAULT '',  -- what facts_fts holds for it (needed to delete)
        category TEXT NOT NULL DEFAULT 'general',
        trust REAL NOT NULL DEFAULT 0.5,
        source TEXT NOT NULL DEFAULT 'tool',
        helpful INTEGER NOT NULL DEFAULT 0,
        unhelpful INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (user_id, content)
    )""",
    "CREATE INDEX IF NOT EXISTS ix_facts_user ON facts(user_id, source)",
    """CREATE TABLE IF NOT EXISTS entities (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        name TEXT NOT NULL,
        UNIQUE (user_id, name)
    )""",
    """CREATE TABLE IF NOT EXISTS fact_entities (
        fact_id INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
        entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
        PRIMARY KEY (fact_id, entity_id)
    )""",
    "CREATE INDEX IF NOT EXISTS ix_fact_entities_entity ON fact_entities(entity_id)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS facts_fts USING fts5(body, scope, content='', "
    "tokenize='unicode61 remove_diacritics 2')",
]

_SERVER_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS holographic_facts (
        id BIGSERIAL PRIMARY KEY,
        user_id TEXT NOT NULL,
        content TEXT NOT NULL,
        body TEXT NOT NULL DEFAULT '',
        category TEXT NOT NULL DEFAULT 'general',
        trust DOUBLE PRECISION NOT NULL DEFAULT 0.5,
        source TEXT NOT NULL DEFAULT 'tool',
        helpful INTEGER NOT NULL DEFAULT 0,
        unhelpful INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        words TSVECTOR NOT NULL DEFAULT ''::tsvector,
        UNIQUE (user_id, content)
    )""",
    "CREATE INDEX IF NOT EXISTS ix_holographic_facts_user ON holographic_facts(user_id, source)",
    "CREATE INDEX IF NOT EXISTS ix_holographic_facts_words ON holographic_facts USING GIN (words)",
    """CREATE TABLE IF NOT EXISTS holographic_entities (
        id BIGSERIAL PRIMARY KEY,
        user_id TEXT NOT NULL,
        name TEXT NOT NULL,
        UNIQUE (user_id, name)
    )""",
    """CREATE TABLE IF NOT EXISTS holographic_fact_entities (
        fact_id BIGINT NOT NULL REFERENCES holographic_facts(id) ON DELETE CASCADE,
        entity_id BIGINT NOT NULL REFERENCES holographic_entities(id) ON DELETE CASCADE,
        PRIMARY KEY (fact_id, entity_id)
    )""",
    "CREATE INDEX IF NOT EXISTS ix_holographic_fact_entities_entity "
    "ON holographic_fact_entities(entity_id)",
]


@dataclass(frozen=True, slots=True)
class Fact:
    id: int
    content: str
    category: str
    trust: float
    source: str
    entities: tuple[str, ...]
    body: str = ""  # the fact's indexed words


class FactStore:
    """One store shared by every person's provider instance: `FactStore.at(home)` is the
    home's file, or its tables on PostgreSQL. Every method runs the same SQL on both;
    the words index is the one part each backend does its own way."""

    FILENAME = FILENAME
    TABLES: ClassVar[dict[str, str]]  # the tables' names on this backend
    SCHEMA = _SCHEMA  # the file's (SidecarDB creates it)

    @staticmethod
    def at(home: Path) -> FactStore:
        engine = server_for(home)
        if engine is not None:
            return ServerFactStore.on(engine)
        return FileFactStore.in_home(home)

    @staticmethod
    def exists(home: Path) -> bool:
        """Whether the home has a fact store (a file, or the database's tables)."""
        return server_for(home) is not None or (home / FILENAME).exists()

    def _conn(self) -> Any:  # a context manager giving a RawConnection (per backend)
        raise NotImplementedError

    def _write(self, *people: str) -> Any:
        """A context manager giving a RawConnection in a write transaction of these
        people's facts (on PostgreSQL, under their locks; per backend)."""
        raise NotImplementedError

    def _sql(self, template: str) -> str:
        return template.format(**self.TABLES)

    # -- the words index (per backend) -------------------------------------------------

    def _index_words(self, conn: RawConnection, user_id: str, fact_id: int, body: str) -> None:
        raise NotImplementedError

    def _unindex_words(self, conn: RawConnection, user_id: str, fact_id: int, body: str) -> None:
        raise NotImplementedError

    def candidates(self, user_id: str, terms: Iterable[str], limit: int = 50) -> list[int]:
        """The person's facts holding any of `terms`, best first (at most `limit`)."""
        raise NotImplementedError

    # -- writes ------------------------------------------------------------------------

    def add(
        self,
        user_id: str,
        content: str,
        *,
        category: str,
        source: str,
        entities: Iterable[str],
        body: str,
        trust: float = 0.5,
    ) -> int:
        """The fact's id (an existing identical fact of this person is kept as it is)."""
        with self._write(user_id) as conn:
            row = conn.execute(
                self._sql("SELECT id FROM {facts} WHERE user_id = ? AND content = ?"),
                (user_id, content),
            ).fetchone()
            if row is not None:
                return int(row[0])
            stamp = now()
            fact_id = int(
                conn.execute(
                    self._sql(
                        "INSERT INTO {facts}(user_id, content, body, category, trust, source, "
                        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
                    ),
                    (user_id, content, body, category, trust, source, stamp, stamp),
                ).fetchone()[0]
            )
            self._index(conn, user_id, fact_id, entities, body)
            return fact_id

    def update(
        self, user_id: str, fact_id: int, content: str, entities: Iterable[str], body: str
    ) -> bool:
        with self._write(user_id) as conn:
            old = self._row(conn, user_id, fact_id)
            if old is None:
                return False
            self._unindex_words(conn, user_id, fact_id, old[1])
            conn.execute(self._sql("DELETE FROM {fact_entities} WHERE fact_id = ?"), (fact_id,))
            conn.execute(
                self._sql("UPDATE {facts} SET content = ?, body = ?, updated_at = ? WHERE id = ?"),
                (content, body, now(), fact_id),
            )
            self._index(conn, user_id, fact_id, entities, body)
            return True

    def remove(self, user_id: str, fact_ids: Iterable[int]) -> int:
        removed = 0
        with self._write(user_id) as conn:
            for fact_id in fact_ids:
                old = self._row(conn, user_id, fact_id)
                if old is None:
                    continue
                self._unindex_words(conn, user_id, fact_id, old[1])
                conn.execute(self._sql("DELETE FROM {facts} WHERE id = ?"), (fact_id,))
                removed += 1
        return removed

    def merge_people(self, keep: str, gone: str) -> int:
        """Every fact and entity of `gone` becomes `keep`'s (a link merged the two): a
        fact `keep` already has is kept once (the higher trust, the feedback of both),
        the rest move with their search index and entities. One transaction; returns
        how many facts moved."""
        moved = 0
        with self._write(keep, gone) as conn:
            facts = conn.execute(
                self._sql(
                    "SELECT id, content, body, trust, helpful, unhelpful FROM {facts} "
                    "WHERE user_id = ?"
                ),
                (gone,),
            ).fetchall()
            for fact_id, content, body, trust, helpful, unhelpful in facts:
                self._unindex_words(conn, gone, fact_id, body)
                twin = conn.execute(
                    self._sql("SELECT id, trust FROM {facts} WHERE user_id = ? AND content = ?"),
                    (keep, content),
                ).fetchone()
                if twin is not None:  # the same fact: one, with what both learned of it
                    conn.execute(
                        self._sql(
                            "UPDATE {facts} SET trust = ?, helpful = helpful + ?, "
                            "unhelpful = unhelpful + ? WHERE id = ?"
                        ),
                        (max(float(twin[1]), float(trust)), helpful, unhelpful, twin[0]),
                    )
                    conn.execute(
                        self._sql(
                            "INSERT INTO {fact_entities}(fact_id, entity_id) "
                            "SELECT ?, entity_id FROM {fact_entities} WHERE fact_id = ? "
                            "ON CONFLICT DO NOTHING"
                        ),
                        (twin[0], fact_id),
                    )
                    conn.execute(self._sql("DELETE FROM {facts} WHERE id = ?"), (fact_id,))
                    continue
                conn.execute(
                    self._sql("UPDATE {facts} SET user_id = ? WHERE id = ?"), (keep, fact_id)
                )
                self._index_words(conn, keep, fact_id, body)
                moved += 1
            for entity_id, name in conn.execute(
                self._sql("SELECT id, name FROM {entities} WHERE user_id = ?"), (gone,)
            ).fetchall():
                twin = conn.execute(
                    self._sql("SELECT id FROM {entities} WHERE user_id = ? AND name = ?"),
                    (keep, name),
                ).fetchone()
                if twin is None:
                    conn.execute(
                        self._sql("UPDATE {entities} SET user_id = ? WHERE id = ?"),
                        (keep, entity_id),
                    )
                    continue
                conn.execute(
                    self._sql(
                        "INSERT INTO {fact_entities}(fact_id, entity_id) "
                        "SELECT fact_id, ? FROM {fact_entities} WHERE entity_id = ? "
                        "ON CONFLICT DO NOTHING"
                    ),
                    (twin[0], entity_id),
                )
                conn.execute(self._sql("DELETE FROM {entities} WHERE id = ?"), (entity_id,))
        return moved

    def adjust_trust(
        self, user_id: str, fact_id: int, delta: float, helpful: bool | None
    ) -> float | None:
        column = {True: "helpful = helpful + 1,", False: "unhelpful = unhelpful + 1,", None: ""}[
            helpful
        ]
        with self._write(user_id) as conn:
            row = conn.execute(
                self._sql("SELECT trust FROM {facts} WHERE id = ? AND user_id = ?"),
                (fact_id, user_id),
            ).fetchone()
            if row is None:
                return None
            trust = max(0.0, min(1.0, float(row[0]) + delta))
            conn.execute(
                self._sql(f"UPDATE {{facts}} SET {column} trust = ?, updated_at = ? WHERE id = ?"),
                (trust, now(), fact_id),
            )
        return trust

    def _index(
        self,
        conn: RawConnection,
        user_id: str,
        fact_id: int,
        entities: Iterable[str],
        body: str,
    ) -> None:
        self._index_words(conn, user_id, fact_id, body)
        for name in dict.fromkeys(entities):
            conn.execute(
                self._sql(
                    "INSERT INTO {entities}(user_id, name) VALUES (?, ?) ON CONFLICT DO NOTHING"
                ),
                (user_id, name),
            )
            conn.execute(
                self._sql(
                    "INSERT INTO {fact_entities}(fact_id, entity_id) SELECT ?, id FROM "
                    "{entities} WHERE user_id = ? AND name = ? ON CONFLICT DO NOTHING"
                ),
                (fact_id, user_id, name),
            )

    def _row(self, conn: RawConnection, user_id: str, fact_id: int) -> tuple[int, str] | None:
        row = conn.execute(
            self._sql("SELECT id, body FROM {facts} WHERE id = ? AND user_id = ?"),
            (fact_id, user_id),
        ).fetchone()
        return (int(row[0]), str(row[1])) if row else None

    # -- reads -------------------------------------------------------------------------

    def with_entity(self, user_id: str, names: Iterable[str], limit: int = 1000) -> list[int]:
        """The newest facts naming any of `names` (at most `limit`)."""
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return []
        marks = ",".join("?" for _ in wanted)
        with self._conn() as conn:
            rows = conn.execute(
                self._sql(
                    "SELECT DISTINCT fe.fact_id FROM {fact_entities} fe JOIN {entities} e ON "
                    f"e.id = fe.entity_id WHERE e.user_id = ? AND e.name IN ({marks}) "
                    "ORDER BY fe.fact_id DESC LIMIT ?"
                ),
                (user_id, *wanted, limit),
            ).fetchall()
        return [int(r[0]) for r in rows]

    def facts(
        self, user_id: str, ids: Iterable[int] | None = None, *, source: str | None = None
    ) -> list[Fact]:
        sql = "SELECT id, content, category, trust, source, body FROM {facts} WHERE user_id = ?"
        params: list[object] = [user_id]
        if ids is not None:
            wanted = list(ids)
            if not wanted:
                return []
            sql += f" AND id IN ({','.join('?' for _ in wanted)})"
            params += wanted
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        with self._conn() as conn:
            rows = conn.execute(self._sql(sql + " ORDER BY id"), params).fetchall()
            names = self._entity_names(conn, [int(r[0]) for r in rows])
        return [
            Fact(
                int(r[0]),
                str(r[1]),
                str(r[2]),
                float(r[3]),
                str(r[4]),
                names.get(int(r[0]), ()),
                str(r[5]),
            )
            for r in rows
        ]

    def find(self, user_id: str, content: str, source: str | None = None) -> Fact | None:
        found = [f for f in self.facts(user_id, source=source) if f.content == content]
        return found[0] if found else None

    def _entity_names(self, conn: RawConnection, ids: list[int]) -> dict[int, tuple[str, ...]]:
        if not ids:
            return {}
        rows = conn.execute(
            self._sql(
                "SELECT fe.fact_id, e.name FROM {fact_entities} fe JOIN {entities} e ON e.id = "
                f"fe.entity_id WHERE fe.fact_id IN ({','.join('?' for _ in ids)}) ORDER BY e.name"
            ),
            ids,
        ).fetchall()
        names: dict[int, list[str]] = {}
        for fact_id, name in rows:
            names.setdefault(int(fact_id), []).append(str(name))
        return {k: tuple(v) for k, v in names.items()}


class FileFactStore(FactStore, SidecarDB):
    """$HERMES_HOME/holographic.db, with its FTS5 index."""

    TABLES: ClassVar[dict[str, str]] = {
        "facts": "facts",
        "entities": "entities",
        "fact_entities": "fact_entities",
    }

    def _conn(self) -> Any:
        return self._file_conn()

    def _write(self, *people: str) -> Any:
        return self._file_write()  # (one writer at a time: the file's lock)

    def _index_words(self, conn: RawConnection, user_id: str, fact_id: int, body: str) -> None:
        conn.execute(
            "INSERT INTO facts_fts(rowid, body, scope) VALUES (?, ?, ?)",
            (fact_id, body, scope_token(user_id)),
        )

    def _unindex_words(self, conn: RawConnection, user_id: str, fact_id: int, body: str) -> None:
        conn.execute(
            "INSERT INTO facts_fts(facts_fts, rowid, body, scope) VALUES ('delete', ?, ?, ?)",
            (fact_id, body, scope_token(user_id)),
        )

    def candidates(self, user_id: str, terms: Iterable[str], limit: int = 50) -> list[int]:
        with self._conn() as conn:
            query = match_query(conn, "facts_fts", user_id, terms)
            if not query:
                return []
            rows = conn.execute(
                "SELECT rowid FROM facts_fts WHERE facts_fts MATCH ? ORDER BY rank LIMIT ?",
                (query, limit),
            ).fetchall()
        return [int(r[0]) for r in rows]


class ServerFactStore(FactStore, ServerSidecar):
    """The `holographic_*` tables of the state database on PostgreSQL."""

    TABLES: ClassVar[dict[str, str]] = {
        "facts": "holographic_facts",
        "entities": "holographic_entities",
        "fact_entities": "holographic_fact_entities",
    }
    SERVER_SCHEMA = _SERVER_SCHEMA

    def _conn(self) -> Any:
        return self._server_conn()

    def _write(self, *people: str) -> Any:
        return self._server_write([f"facts:{person}" for person in sorted(set(people))])

    def _index_words(self, conn: RawConnection, user_id: str, fact_id: int, body: str) -> None:
        conn.execute(
            "UPDATE holographic_facts SET words = to_tsvector('simple', ?) WHERE id = ?",
            (fold(body), fact_id),
        )

    def _unindex_words(self, conn: RawConnection, user_id: str, fact_id: int, body: str) -> None:
        pass  # the words live in the fact's row: rewritten with it, deleted with it

    def rebuild_words(self, conn: RawConnection) -> None:
        """Every fact's words (after rows were copied in)."""
        rows = conn.execute("SELECT id, body FROM holographic_facts").fetchall()
        conn.executemany(
            "UPDATE holographic_facts SET words = to_tsvector('simple', ?) WHERE id = ?",
            [(fold(str(body)), int(fact_id)) for fact_id, body in rows],
        )

    def candidates(self, user_id: str, terms: Iterable[str], limit: int = 50) -> list[int]:
        """Any of the terms (each a phrase of its folded words), ranked by ts_rank_cd
        over the person's rows (the provider ranks the candidates again itself)."""
        wanted = [fold(t) for t in dict.fromkeys(terms) if t and fold(t).strip()]
        if not wanted:
            return []
        query = " || ".join("phraseto_tsquery('simple', ?)" for _ in wanted)
        with self._conn() as conn:
            rows = conn.execute(
                f"SELECT id FROM holographic_facts, (SELECT {query}) AS q(t) WHERE user_id = ? "
                "AND words @@ q.t ORDER BY ts_rank_cd(words, q.t) DESC, id DESC LIMIT ?",
                (*wanted, user_id, limit),
            ).fetchall()
        return [int(r[0]) for r in rows]


__all__ = ["FILENAME", "Fact", "FactStore", "FileFactStore", "ServerFactStore"]
