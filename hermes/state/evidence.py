"""The evidence provider's store: memory that is evidence, not summaries.

Its own SQLite file ($HERMES_HOME/evidence.db, WAL, 0600); every row belongs to one
person. Authority runs one way: `sources` (a file, a session, a URL, a note) and their
`chunks` (stable ids from source + position + content hash, text, line span) are the
evidence; `facts` (draft | verified | retracted), `events` and `artifacts` (derived
documents, always draft until reviewed) must cite chunks; `context_packs` are named,
reproducible bundles of facts and chunks.

Rules held by the schema and this module, not only checked afterwards:
- a fact, event or artifact cannot exist without at least one live chunk of the same
  person (checked in the transaction that creates it; the links are foreign keys with
  ON DELETE RESTRICT, so a cited chunk cannot be deleted, and a trigger refuses to
  remove a fact's last citation);
- re-indexing a changed source keeps every chunk whose text is unchanged, inserts the
  new ones, deletes an old chunk only when nothing cites it, and marks the cited ones
  stale instead, flagging the facts that cite them: provenance is never cut;
- a source that vanished is marked stale, with its chunks and the facts citing them.
Model output (the `evidence_add_fact` tool, drafted artifacts) enters only as a draft.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from hermes.state.cjk import index_terms
from hermes.state.engine import RawConnection
from hermes.state.search import fold
from hermes.state.sidecar import (
    ServerSidecar,
    SidecarDB,
    Tabled,
    match_query,
    now,
    scope_token,
    server_for,
)

FILENAME = "evidence.db"

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS sources (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('file', 'session', 'url', 'note')),
        locator TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime REAL,
        indexed_at TEXT NOT NULL,
        stale INTEGER NOT NULL DEFAULT 0,
        UNIQUE (user_id, kind, locator)
    )""",
    """CREATE TABLE IF NOT EXISTS chunks (
        id TEXT PRIMARY KEY,
        source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE RESTRICT,
        user_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        text TEXT NOT NULL,
        line_start INTEGER NOT NULL,
        line_end INTEGER NOT NULL,
        stale INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX IF NOT EXISTS ix_chunks_source ON chunks(source_id, position)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(body, scope, content='', "
    "tokenize='unicode61 remove_diacritics 2')",
    """CREATE TABLE IF NOT EXISTS facts (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        text TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'verified', 'retracted')),
        confidence REAL NOT NULL DEFAULT 0.5,
        flagged INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        reviewed_at TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS fact_chunks (
        fact_id INTEGER NOT NULL REFERENCES facts(id) ON DELETE CASCADE,
        chunk_id TEXT NOT NULL REFERENCES chunks(id) ON DELETE RESTRICT,
        PRIMARY KEY (fact_id, chunk_id)
    )""",
    "CREATE INDEX IF NOT EXISTS ix_fact_chunks_chunk ON fact_chunks(chunk_id)",
    """CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        what TEXT NOT NULL,
        happened_at TEXT NOT NULL,
        chunk_id TEXT NOT NULL REFERENCES chunks(id) ON DELETE RESTRICT
    )""",
    """CREATE TABLE IF NOT EXISTS artifacts (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'reviewed')),
        created_at TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS artifact_chunks (
        artifact_id INTEGER NOT NULL REFERENCES artifacts(id) ON DELETE CASCADE,
        chunk_id TEXT NOT NULL REFERENCES chunks(id) ON DELETE RESTRICT,
        PRIMARY KEY (artifact_id, chunk_id)
    )""",
    """CREATE TABLE IF NOT EXISTS context_packs (
        id INTEGER PRIMARY KEY,
        user_id TEXT NOT NULL,
        name TEXT NOT NULL,
        query TEXT NOT NULL,
        fact_ids TEXT NOT NULL,
        chunk_ids TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (user_id, name)
    )""",
    # a fact keeps at least one citation: its last one cannot be removed
    """CREATE TRIGGER IF NOT EXISTS fact_keeps_a_citation BEFORE DELETE ON fact_chunks
    WHEN EXISTS (SELECT 1 FROM facts WHERE id = old.fact_id)
     AND (SELECT count(*) FROM fact_chunks WHERE fact_id = old.fact_id) = 1
    BEGIN SELECT RAISE(ABORT, 'a fact must cite at least one chunk'); END""",
]


_TABLES = (
    "sources",
    "chunks",
    "facts",
    "fact_chunks",
    "events",
    "artifacts",
    "artifact_chunks",
    "context_packs",
)

# the same tables on PostgreSQL (named evidence_*): foreign keys that a merge may defer
# (it renames chunks with their citations), the last-citation rule as a trigger
_SERVER_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS evidence_sources (
        id BIGSERIAL PRIMARY KEY,
        user_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('file', 'session', 'url', 'note')),
        locator TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        size BIGINT NOT NULL,
        mtime DOUBLE PRECISION,
        indexed_at TEXT NOT NULL,
        stale INTEGER NOT NULL DEFAULT 0,
        UNIQUE (user_id, kind, locator)
    )""",
    """CREATE TABLE IF NOT EXISTS evidence_chunks (
        id TEXT PRIMARY KEY,
        source_id BIGINT NOT NULL REFERENCES evidence_sources(id) ON DELETE RESTRICT
            DEFERRABLE INITIALLY IMMEDIATE,
        user_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        text TEXT NOT NULL,
        line_start INTEGER NOT NULL,
        line_end INTEGER NOT NULL,
        stale INTEGER NOT NULL DEFAULT 0,
        words TSVECTOR NOT NULL DEFAULT ''::tsvector
    )""",
    "CREATE INDEX IF NOT EXISTS ix_evidence_chunks_source ON evidence_chunks(source_id, position)",
    "CREATE INDEX IF NOT EXISTS ix_evidence_chunks_user ON evidence_chunks(user_id)",
    "CREATE INDEX IF NOT EXISTS ix_evidence_chunks_words ON evidence_chunks USING GIN (words)",
    """CREATE TABLE IF NOT EXISTS evidence_facts (
        id BIGSERIAL PRIMARY KEY,
        user_id TEXT NOT NULL,
        text TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'verified', 'retracted')),
        confidence DOUBLE PRECISION NOT NULL DEFAULT 0.5,
        flagged INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        reviewed_at TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS evidence_fact_chunks (
        fact_id BIGINT NOT NULL REFERENCES evidence_facts(id) ON DELETE CASCADE,
        chunk_id TEXT NOT NULL REFERENCES evidence_chunks(id) ON DELETE RESTRICT
            DEFERRABLE INITIALLY IMMEDIATE,
        PRIMARY KEY (fact_id, chunk_id)
    )""",
    "CREATE INDEX IF NOT EXISTS ix_evidence_fact_chunks_chunk ON evidence_fact_chunks(chunk_id)",
    """CREATE TABLE IF NOT EXISTS evidence_events (
        id BIGSERIAL PRIMARY KEY,
        user_id TEXT NOT NULL,
        what TEXT NOT NULL,
        happened_at TEXT NOT NULL,
        chunk_id TEXT NOT NULL REFERENCES evidence_chunks(id) ON DELETE RESTRICT
            DEFERRABLE INITIALLY IMMEDIATE
    )""",
    """CREATE TABLE IF NOT EXISTS evidence_artifacts (
        id BIGSERIAL PRIMARY KEY,
        user_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'reviewed')),
        created_at TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS evidence_artifact_chunks (
        artifact_id BIGINT NOT NULL REFERENCES evidence_artifacts(id) ON DELETE CASCADE,
        chunk_id TEXT NOT NULL REFERENCES evidence_chunks(id) ON DELETE RESTRICT
            DEFERRABLE INITIALLY IMMEDIATE,
        PRIMARY KEY (artifact_id, chunk_id)
    )""",
    """CREATE TABLE IF NOT EXISTS evidence_context_packs (
        id BIGSERIAL PRIMARY KEY,
        user_id TEXT NOT NULL,
        name TEXT NOT NULL,
        query TEXT NOT NULL,
        fact_ids TEXT NOT NULL,
        chunk_ids TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (user_id, name)
    )""",
    """CREATE OR REPLACE FUNCTION evidence_fact_keeps_a_citation() RETURNS trigger AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM evidence_facts WHERE id = OLD.fact_id)
           AND (SELECT count(*) FROM evidence_fact_chunks WHERE fact_id = OLD.fact_id) = 1 THEN
            RAISE EXCEPTION 'a fact must cite at least one chunk';
        END IF;
        RETURN OLD;
    END $$ LANGUAGE plpgsql""",
    "DROP TRIGGER IF EXISTS fact_keeps_a_citation ON evidence_fact_chunks",
    """CREATE TRIGGER fact_keeps_a_citation BEFORE DELETE ON evidence_fact_chunks
    FOR EACH ROW EXECUTE FUNCTION evidence_fact_keeps_a_citation()""",
]

FACT_STATUSES = ("draft", "verified", "retracted")  # only verified facts are recalled


class EvidenceError(Exception):
    """A rule of the store would be broken; the message says which."""


@dataclass(frozen=True, slots=True)
class Chunk:
    id: str
    source_id: int
    locator: str
    kind: str
    text: str
    line_start: int
    line_end: int
    stale: bool


@dataclass(frozen=True, slots=True)
class FactRow:
    id: int
    text: str
    status: str
    confidence: float
    flagged: bool
    chunk_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class IndexResult:
    source_id: int
    changed: bool  # False: same content as indexed before (nothing touched)
    inserted: int
    kept: int
    deleted: int
    staled: int


def chunk_id(source_key: str, position: int, text: str) -> str:
    """Stable: the same text at the same place of the same source has the same id."""
    digest = hashlib.sha256(f"{source_key}\0{position}\0{text}".encode()).hexdigest()
    return "c" + digest[:20]


class EvidenceStore:
    """The store of a home: `EvidenceStore.at(home)` is its file, or its tables in the
    state database on PostgreSQL. The SQL names tables as {name} (each backend's names
    are filled in) and runs the same on both; the words index is each backend's own."""

    FILENAME = FILENAME
    SCHEMA = _SCHEMA  # the file's (SidecarDB creates it)
    TABLES: ClassVar[dict[str, str]]

    @staticmethod
    def at(home: Path) -> EvidenceStore:
        engine = server_for(home)
        if engine is not None:
            return ServerEvidenceStore.on(engine)
        return FileEvidenceStore.in_home(home)

    where = "the database's evidence tables"  # how messages name it (the file: its path)

    @staticmethod
    def exists(home: Path) -> bool:
        """Whether the home has an evidence store (a file, or the database's tables)."""
        return server_for(home) is not None or (home / FILENAME).exists()

    @contextmanager
    def _conn(self) -> Iterator[Tabled]:
        with self._connection() as conn:
            yield Tabled(conn, self.TABLES)

    @contextmanager
    def _write(self, *people: str) -> Iterator[Tabled]:
        """A write of these people's rows (on PostgreSQL, under their locks)."""
        with self._transaction([f"evidence:{person}" for person in sorted(set(people))]) as conn:
            yield Tabled(conn, self.TABLES)

    def _connection(self) -> AbstractContextManager[RawConnection]:
        raise NotImplementedError

    def _transaction(self, keys: Sequence[str]) -> AbstractContextManager[RawConnection]:
        raise NotImplementedError

    # -- the words index (per backend) -------------------------------------------------

    def _index_chunk(self, conn: Tabled, cid: str, user_id: str, text: str) -> None:
        raise NotImplementedError

    def _unindex_chunk(self, conn: Tabled, cid: str) -> None:
        raise NotImplementedError

    def _chunk_hits(
        self, conn: Tabled, user_id: str, terms: Iterable[str], limit: int
    ) -> list[str]:
        raise NotImplementedError

    def _defer_keys(self, conn: Tabled) -> None:
        """Foreign keys checked at commit (a merge renames chunks with their citations)."""
        raise NotImplementedError

    # -- sources and chunks ------------------------------------------------------------

    def source(
        self, user_id: str, kind: str, locator: str
    ) -> tuple[int, str, int, float | None] | None:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT id, content_hash, size, mtime FROM {sources} WHERE user_id = ? "
                "AND kind = ? AND locator = ?",
                (user_id, kind, locator),
            ).fetchone()
        return (int(row[0]), str(row[1]), int(row[2]), row[3]) if row else None

    def index(
        self,
        user_id: str,
        kind: str,
        locator: str,
        pieces: Sequence[tuple[str, int, int]],
        *,
        content_hash: str,
        size: int,
        mtime: float | None = None,
        append: bool = False,
    ) -> IndexResult:
        """Store a source's chunks (text, first line, last line), keeping provenance:
        unchanged chunks are kept, new ones inserted, old ones deleted only when nothing
        cites them (else marked stale, their facts flagged). `append`: add `pieces` after
        the chunks already there (a conversation growing turn by turn)."""
        with self._write(user_id) as conn:
            row = conn.execute(
                "SELECT id, content_hash FROM {sources} WHERE user_id = ? AND kind = ? "
                "AND locator = ?",
                (user_id, kind, locator),
            ).fetchone()
            if row is not None and row[1] == content_hash and not append:
                conn.execute(
                    "UPDATE {sources} SET stale = 0, mtime = ?, indexed_at = ? WHERE id = ?",
                    (mtime, now(), row[0]),
                )
                return IndexResult(int(row[0]), False, 0, 0, 0, 0)
            if row is None:
                source_id = int(
                    conn.execute(
                        "INSERT INTO {sources}(user_id, kind, locator, content_hash, size, mtime, "
                        "indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
                        (user_id, kind, locator, content_hash, size, mtime, now()),
                    ).fetchone()[0]
                )
            else:
                source_id = int(row[0])
                conn.execute(
                    "UPDATE {sources} SET content_hash = ?, size = ?, mtime = ?, indexed_at = ?, "
                    "stale = 0 WHERE id = ?",
                    (content_hash, size, mtime, now(), source_id),
                )
            old = {
                str(r[0]): int(r[1])
                for r in conn.execute(
                    "SELECT id, position FROM {chunks} WHERE source_id = ? AND stale = 0",
                    (source_id,),
                )
            }
            start = (max(old.values()) + 1) if append and old else 0
            key = f"{user_id}\0{kind}\0{locator}"
            wanted: dict[str, tuple[int, str, int, int]] = {}
            for offset, (text, first, last) in enumerate(pieces):
                position = start + offset
                wanted[chunk_id(key, position, text)] = (position, text, first, last)
            inserted = kept = deleted = staled = 0
            for cid, (position, text, first, last) in wanted.items():
                if cid in old:
                    kept += 1
                    continue
                revived = conn.execute(
                    "UPDATE {chunks} SET stale = 0 WHERE id = ? AND source_id = ?", (cid, source_id)
                ).rowcount
                if revived:
                    kept += 1
                    continue
                conn.execute(
                    "INSERT INTO {chunks}(id, source_id, user_id, position, text, line_start, "
                    "line_end) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (cid, source_id, user_id, position, text, first, last),
                )
                self._index_chunk(conn, cid, user_id, text)
                inserted += 1
            for cid in [c for c in old if c not in wanted] if not append else []:
                if _cited(conn, cid):
                    conn.execute("UPDATE {chunks} SET stale = 1 WHERE id = ?", (cid,))
                    _flag_citing(conn, [cid])
                    staled += 1
                else:
                    self._drop_chunk(conn, cid)
                    deleted += 1
            return IndexResult(source_id, True, inserted, kept, deleted, staled)

    def vanished(self, user_id: str, kind: str, locators: Iterable[str]) -> int:
        """Sources that are gone: stale, their cited chunks stale and their facts
        flagged, their uncited chunks deleted. Returns how many."""
        count = 0
        with self._write(user_id) as conn:
            for locator in locators:
                row = conn.execute(
                    "SELECT id FROM {sources} WHERE user_id = ? AND kind = ? AND locator = ?",
                    (user_id, kind, locator),
                ).fetchone()
                if row is None:
                    continue
                conn.execute("UPDATE {sources} SET stale = 1 WHERE id = ?", (row[0],))
                chunk_ids = [
                    str(r[0])
                    for r in conn.execute("SELECT id FROM {chunks} WHERE source_id = ?", (row[0],))
                ]
                for cid in chunk_ids:
                    if _cited(conn, cid):
                        conn.execute("UPDATE {chunks} SET stale = 1 WHERE id = ?", (cid,))
                        _flag_citing(conn, [cid])
                    else:
                        self._drop_chunk(conn, cid)
                count += 1
        return count

    def locators(self, user_id: str, kind: str, under: str = "") -> list[str]:
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT locator FROM {sources} WHERE user_id = ? AND kind = ? AND stale = 0 "
                "AND locator LIKE ? ESCAPE '\\'",
                (user_id, kind, _like_prefix(under) + "%"),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def chunks(self, user_id: str, ids: Iterable[str]) -> list[Chunk]:
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT c.id, c.source_id, s.locator, s.kind, c.text, c.line_start, c.line_end, "
                "c.stale FROM {chunks} c JOIN {sources} s ON s.id = c.source_id "
                f"WHERE c.user_id = ? AND c.id IN ({','.join('?' for _ in wanted)})",
                (user_id, *wanted),
            ).fetchall()
        found = {
            str(r[0]): Chunk(
                str(r[0]),
                int(r[1]),
                str(r[2]),
                str(r[3]),
                str(r[4]),
                int(r[5]),
                int(r[6]),
                bool(r[7]),
            )
            for r in rows
        }
        return [found[i] for i in wanted if i in found]

    def search_chunks(self, user_id: str, terms: Iterable[str], limit: int = 10) -> list[Chunk]:
        with self._conn() as conn:
            ids = self._chunk_hits(conn, user_id, terms, limit)
        return self.chunks(user_id, ids)

    # -- facts, events, artifacts, packs -----------------------------------------------

    def add_fact(
        self,
        user_id: str,
        text: str,
        chunk_ids: Sequence[str],
        *,
        status: str = "draft",
        confidence: float = 0.5,
    ) -> int:
        """A fact citing `chunk_ids` (at least one live chunk of this person)."""
        if not text.strip():
            raise EvidenceError("a fact needs text")
        with self._write(user_id) as conn:
            live = _live_chunks(conn, user_id, chunk_ids)
            if not live:
                raise EvidenceError(
                    "a fact must cite at least one live chunk of your own evidence "
                    f"(given: {', '.join(chunk_ids) or 'none'})"
                )
            fact_id = int(
                conn.execute(
                    "INSERT INTO {facts}(user_id, text, status, confidence, created_at) "
                    "VALUES (?, ?, ?, ?, ?) RETURNING id",
                    (user_id, text.strip(), status, confidence, now()),
                ).fetchone()[0]
            )
            conn.executemany(
                "INSERT INTO {fact_chunks}(fact_id, chunk_id) VALUES (?, ?)",
                [(fact_id, c) for c in live],
            )
            return fact_id

    def review_fact(self, user_id: str, fact_id: int, status: str) -> bool:
        if status not in FACT_STATUSES:
            raise EvidenceError("status must be draft, verified or retracted")
        with self._write(user_id) as conn:
            return bool(
                conn.execute(
                    "UPDATE {facts} SET status = ?, reviewed_at = ?, flagged = 0 WHERE id = ? "
                    "AND user_id = ?",
                    (status, now(), fact_id, user_id),
                ).rowcount
            )

    def facts(
        self,
        user_id: str,
        *,
        status: str | None = None,
        citing: Iterable[str] | None = None,
        ids: Iterable[int] | None = None,
    ) -> list[FactRow]:
        sql = (
            "SELECT f.id, f.text, f.status, f.confidence, f.flagged FROM {facts} f "
            "WHERE f.user_id = ?"
        )
        params: list[object] = [user_id]
        if status:
            sql += " AND f.status = ?"
            params.append(status)
        if citing is not None:
            wanted = list(citing)
            if not wanted:
                return []
            marks = ",".join("?" for _ in wanted)
            sql += f" AND f.id IN (SELECT fact_id FROM {{fact_chunks}} WHERE chunk_id IN ({marks}))"
            params += wanted
        if ids is not None:
            chosen = list(ids)
            if not chosen:
                return []
            sql += f" AND f.id IN ({','.join('?' for _ in chosen)})"
            params += chosen
        cites: dict[int, list[str]] = {}
        with self._conn() as conn:
            rows = conn.execute(sql + " ORDER BY f.id", params).fetchall()
            for fact_id, cid in conn.execute(
                "SELECT fact_id, chunk_id FROM {fact_chunks} WHERE fact_id IN "
                f"({','.join(str(int(r[0])) for r in rows) or 'NULL'}) ORDER BY chunk_id"
            ).fetchall():
                cites.setdefault(int(fact_id), []).append(str(cid))
        return [
            FactRow(
                int(r[0]),
                str(r[1]),
                str(r[2]),
                float(r[3]),
                bool(r[4]),
                tuple(cites.get(int(r[0]), ())),
            )
            for r in rows
        ]

    def add_event(self, user_id: str, what: str, chunk: str, happened_at: str | None = None) -> int:
        with self._write(user_id) as conn:
            if not _live_chunks(conn, user_id, [chunk]):
                raise EvidenceError("an event must cite a live chunk of your own evidence")
            return int(
                conn.execute(
                    "INSERT INTO {events}(user_id, what, happened_at, chunk_id) "
                    "VALUES (?, ?, ?, ?) RETURNING id",
                    (user_id, what, happened_at or now(), chunk),
                ).fetchone()[0]
            )

    def add_artifact(self, user_id: str, kind: str, text: str, chunk_ids: Sequence[str]) -> int:
        """A derived document (a drafted summary): always a draft, citing its chunks."""
        with self._write(user_id) as conn:
            live = _live_chunks(conn, user_id, chunk_ids)
            if not live:
                raise EvidenceError("an artifact must cite at least one live chunk")
            artifact_id = int(
                conn.execute(
                    "INSERT INTO {artifacts}(user_id, kind, text, created_at) "
                    "VALUES (?, ?, ?, ?) RETURNING id",
                    (user_id, kind, text, now()),
                ).fetchone()[0]
            )
            conn.executemany(
                "INSERT INTO {artifact_chunks}(artifact_id, chunk_id) VALUES (?, ?)",
                [(artifact_id, c) for c in live],
            )
            return artifact_id

    def merge_people(self, keep: str, gone: str) -> int:
        """Everything of `gone` becomes `keep`'s (a link merged the two), in one
        transaction; returns how many chunks moved. Chunks are renamed to the ids `keep`
        would give them (so indexing the same file again finds them unchanged), with
        every citation, event, artifact and pack following; a source both indexed keeps
        `keep`'s chunks, and `gone`'s old ones stay (stale) only where something cites
        them. A pack name both used gets `gone`'s id added to it."""
        moved = 0
        with self._write(keep, gone) as conn:
            self._defer_keys(conn)  # ids change with their citations
            renamed: dict[str, str] = {}
            sources = conn.execute(
                "SELECT id, kind, locator FROM {sources} WHERE user_id = ?", (gone,)
            ).fetchall()
            for source_id, kind, locator in sources:
                twin = conn.execute(
                    "SELECT id FROM {sources} WHERE user_id = ? AND kind = ? AND locator = ?",
                    (keep, kind, locator),
                ).fetchone()
                target = int(twin[0]) if twin is not None else int(source_id)
                key = f"{keep}\0{kind}\0{locator}"
                chunks = conn.execute(
                    "SELECT id, position, text, stale FROM {chunks} WHERE source_id = ?",
                    (source_id,),
                ).fetchall()
                for cid, position, text, stale in chunks:
                    self._unindex_chunk(conn, cid)
                    new = chunk_id(key, position, text)
                    if conn.execute("SELECT 1 FROM {chunks} WHERE id = ?", (new,)).fetchone():
                        renamed[cid] = new  # `keep` has this very chunk: cite it instead
                        continue
                    if twin is not None and not _cited(conn, cid):
                        conn.execute("DELETE FROM {chunks} WHERE id = ?", (cid,))
                        continue
                    conn.execute(
                        "UPDATE {chunks} SET id = ?, user_id = ?, source_id = ?, stale = ? "
                        "WHERE id = ?",
                        (new, keep, target, 1 if twin is not None else stale, cid),
                    )
                    self._index_chunk(conn, new, keep, text)
                    renamed[cid] = new
                    moved += 1
                if twin is None:
                    conn.execute("UPDATE {sources} SET user_id = ? WHERE id = ?", (keep, source_id))
            for old, new in renamed.items():
                for table, column in (
                    ("{fact_chunks}", "fact_id"),
                    ("{artifact_chunks}", "artifact_id"),
                ):
                    conn.execute(
                        f"INSERT INTO {table}({column}, chunk_id) SELECT {column}, ? "
                        f"FROM {table} WHERE chunk_id = ? ON CONFLICT DO NOTHING",
                        (new, old),
                    )
                    conn.execute(f"DELETE FROM {table} WHERE chunk_id = ?", (old,))
                conn.execute("UPDATE {events} SET chunk_id = ? WHERE chunk_id = ?", (new, old))
            for duplicate in set(renamed) - set(renamed.values()):  # cited elsewhere now
                conn.execute("DELETE FROM {chunks} WHERE id = ?", (duplicate,))
            conn.execute("DELETE FROM {sources} WHERE user_id = ?", (gone,))
            for table in ("{facts}", "{events}", "{artifacts}"):
                conn.execute(f"UPDATE {table} SET user_id = ? WHERE user_id = ?", (keep, gone))
            packs = conn.execute(
                "SELECT id, name, chunk_ids FROM {context_packs} WHERE user_id = ?", (gone,)
            ).fetchall()
            for pack_id, name, chunk_ids in packs:
                taken = conn.execute(
                    "SELECT 1 FROM {context_packs} WHERE user_id = ? AND name = ?", (keep, name)
                ).fetchone()
                cited = [renamed.get(c, c) for c in json.loads(chunk_ids)]
                conn.execute(
                    "UPDATE {context_packs} SET user_id = ?, name = ?, chunk_ids = ? WHERE id = ?",
                    (keep, f"{name} ({gone})" if taken else name, json.dumps(cited), pack_id),
                )
        return moved

    def save_pack(
        self, user_id: str, name: str, query: str, fact_ids: list[int], chunk_ids: list[str]
    ) -> None:
        with self._write(user_id) as conn:
            conn.execute(
                "INSERT INTO {context_packs}(user_id, name, query, fact_ids, chunk_ids, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(user_id, name) DO UPDATE SET "
                "query = excluded.query, fact_ids = excluded.fact_ids, "
                "chunk_ids = excluded.chunk_ids, created_at = excluded.created_at",
                (user_id, name, query, json.dumps(fact_ids), json.dumps(chunk_ids), now()),
            )

    def pack(self, user_id: str, name: str) -> tuple[str, list[int], list[str]] | None:
        with self._conn() as conn:
            row = conn.execute(
                "SELECT query, fact_ids, chunk_ids FROM {context_packs} WHERE user_id = ? "
                "AND name = ?",
                (user_id, name),
            ).fetchone()
        return (str(row[0]), json.loads(row[1]), json.loads(row[2])) if row else None

    def _drop_chunk(self, conn: Tabled, cid: str) -> None:
        self._unindex_chunk(conn, cid)
        conn.execute("DELETE FROM {chunks} WHERE id = ?", (cid,))

    def verify(self, user_id: str | None = None) -> dict[str, int]:
        """Counts, and the orphans that must be 0 (a fact or artifact citing no live
        chunk; a citation to a chunk of another person)."""
        who = "" if user_id is None else " WHERE user_id = ?"
        params: tuple[str, ...] = () if user_id is None else (user_id,)
        with self._conn() as conn:

            def count(sql: str) -> int:
                return int(conn.execute(sql, params).fetchone()[0])

            live_fact = (
                "EXISTS (SELECT 1 FROM {fact_chunks} fc JOIN {chunks} c ON c.id = fc.chunk_id "
                "WHERE fc.fact_id = f.id AND c.user_id = f.user_id)"
            )
            live_artifact = (
                "EXISTS (SELECT 1 FROM {artifact_chunks} ac JOIN {chunks} c ON c.id = ac.chunk_id "
                "WHERE ac.artifact_id = a.id AND c.user_id = a.user_id)"
            )
            and_who = "" if user_id is None else " AND f.user_id = ?"
            and_who_a = "" if user_id is None else " AND a.user_id = ?"
            return {
                "sources": count(f"SELECT count(*) FROM {{sources}}{who}"),
                "stale_sources": count(
                    "SELECT count(*) FROM {sources} WHERE stale = 1"
                    + ("" if user_id is None else " AND user_id = ?")
                ),
                "chunks": count(f"SELECT count(*) FROM {{chunks}}{who}"),
                "stale_chunks": count(
                    "SELECT count(*) FROM {chunks} WHERE stale = 1"
                    + ("" if user_id is None else " AND user_id = ?")
                ),
                "facts": count(f"SELECT count(*) FROM {{facts}}{who}"),
                "flagged_facts": count(
                    "SELECT count(*) FROM {facts} WHERE flagged = 1"
                    + ("" if user_id is None else " AND user_id = ?")
                ),
                "artifacts": count(f"SELECT count(*) FROM {{artifacts}}{who}"),
                "orphan_facts": count(
                    f"SELECT count(*) FROM {{facts}} f WHERE NOT {live_fact}{and_who}"
                ),
                "orphan_artifacts": count(
                    f"SELECT count(*) FROM {{artifacts}} a WHERE NOT {live_artifact}{and_who_a}"
                ),
            }


def _body(text: str) -> str:
    """What the index holds for a chunk: its words, and the CJK terms of its runs."""
    return f"{text} {index_terms(text)}"


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _live_chunks(conn: Tabled, user_id: str, ids: Sequence[str]) -> list[str]:
    wanted = [str(i) for i in dict.fromkeys(ids)]
    if not wanted:
        return []
    rows = conn.execute(
        "SELECT id FROM {chunks} WHERE user_id = ? AND stale = 0 "
        f"AND id IN ({','.join('?' for _ in wanted)})",
        (user_id, *wanted),
    ).fetchall()
    found = {str(r[0]) for r in rows}
    return [i for i in wanted if i in found]


def _cited(conn: Tabled, cid: str) -> bool:
    return any(
        conn.execute(f"SELECT 1 FROM {table} WHERE chunk_id = ? LIMIT 1", (cid,)).fetchone()
        for table in ("{fact_chunks}", "{artifact_chunks}", "{events}")
    )


def _flag_citing(conn: Tabled, chunk_ids: list[str]) -> None:
    marks = ",".join("?" for _ in chunk_ids)
    conn.execute(
        "UPDATE {facts} SET flagged = 1 WHERE id IN "
        f"(SELECT fact_id FROM {{fact_chunks}} WHERE chunk_id IN ({marks}))",
        chunk_ids,
    )


class FileEvidenceStore(EvidenceStore, SidecarDB):
    """$HERMES_HOME/evidence.db, with its FTS5 index of the chunks."""

    TABLES: ClassVar[dict[str, str]] = {t: t for t in _TABLES}

    def _connection(self) -> AbstractContextManager[RawConnection]:
        return self._file_conn()

    def _transaction(self, keys: Sequence[str]) -> AbstractContextManager[RawConnection]:
        return self._file_write()  # (one writer at a time: the file's lock)

    def _index_chunk(self, conn: Tabled, cid: str, user_id: str, text: str) -> None:
        conn.execute(
            "INSERT INTO chunks_fts(rowid, body, scope) VALUES "
            "((SELECT rowid FROM chunks WHERE id = ?), ?, ?)",
            (cid, _body(text), scope_token(user_id)),
        )

    def _unindex_chunk(self, conn: Tabled, cid: str) -> None:
        row = conn.execute(
            "SELECT rowid, text, user_id FROM chunks WHERE id = ?", (cid,)
        ).fetchone()
        if row is not None:
            conn.execute(
                "INSERT INTO chunks_fts(chunks_fts, rowid, body, scope) VALUES ('delete', ?, ?, ?)",
                (row[0], _body(str(row[1])), scope_token(str(row[2]))),
            )

    def _chunk_hits(
        self, conn: Tabled, user_id: str, terms: Iterable[str], limit: int
    ) -> list[str]:
        query = match_query(conn.raw, "chunks_fts", user_id, terms)
        if not query:
            return []
        rows = conn.execute(
            "SELECT c.id FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid "
            "WHERE chunks_fts MATCH ? AND c.stale = 0 ORDER BY f.rank LIMIT ?",
            (query, limit),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _defer_keys(self, conn: Tabled) -> None:
        conn.execute("PRAGMA defer_foreign_keys = ON")


class ServerEvidenceStore(EvidenceStore, ServerSidecar):
    """The `evidence_*` tables of the state database on PostgreSQL: the same keys,
    checks and cascades, the last-citation rule a trigger as on SQLite, each chunk's
    words a `tsvector` in its row (GIN-indexed)."""

    TABLES: ClassVar[dict[str, str]] = {t: f"evidence_{t}" for t in _TABLES}
    SERVER_SCHEMA = _SERVER_SCHEMA

    def _connection(self) -> AbstractContextManager[RawConnection]:
        return self._server_conn()

    def _transaction(self, keys: Sequence[str]) -> AbstractContextManager[RawConnection]:
        return self._server_write(keys)

    def _index_chunk(self, conn: Tabled, cid: str, user_id: str, text: str) -> None:
        conn.execute(
            "UPDATE {chunks} SET words = to_tsvector('simple', ?) WHERE id = ?",
            (fold(_body(text)), cid),
        )

    def _unindex_chunk(self, conn: Tabled, cid: str) -> None:
        pass  # the words live in the chunk's row: renamed, rewritten or deleted with it

    def rebuild_words(self, conn: RawConnection) -> None:
        """Every chunk's words (after rows were copied in)."""
        rows = conn.execute("SELECT id, text FROM evidence_chunks").fetchall()
        conn.executemany(
            "UPDATE evidence_chunks SET words = to_tsvector('simple', ?) WHERE id = ?",
            [(fold(_body(str(text))), str(cid)) for cid, text in rows],
        )

    def _chunk_hits(
        self, conn: Tabled, user_id: str, terms: Iterable[str], limit: int
    ) -> list[str]:
        wanted = [f for t in dict.fromkeys(terms) if t and (f := fold(t)).strip()]
        if not wanted:
            return []
        query = " || ".join("phraseto_tsquery('simple', ?)" for _ in wanted)
        rows = conn.execute(
            f"SELECT c.id FROM {{chunks}} c, (SELECT {query}) AS q(t) WHERE c.user_id = ? "
            "AND c.stale = 0 AND c.words @@ q.t ORDER BY ts_rank_cd(c.words, q.t) DESC, c.id "
            "LIMIT ?",
            (*wanted, user_id, limit),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _defer_keys(self, conn: Tabled) -> None:
        conn.execute("SET CONSTRAINTS ALL DEFERRED")


__all__ = [
    "Chunk",
    "EvidenceError",
    "EvidenceStore",
    "FactRow",
    "FileEvidenceStore",
    "IndexResult",
    "ServerEvidenceStore",
    "chunk_id",
]
