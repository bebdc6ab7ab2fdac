"""Message vectors for hybrid retrieval: storage, the embedding queue, and exact
nearest-neighbour search confined to one user.

Schema v10 (hermes/state/schema.py) keeps one vector per user/assistant message with the
model and dimension that made it, and a queue of messages still to embed, filled by
triggers. `vector_model` names the model in use; a search reads only that model's
vectors, and switching model (or a model whose dimension changes) deletes the old
vectors and queues every message again: a rebuild, never a mix.

Search is exact: the user's own vectors (never anyone else's, so there is no global
top-k to filter afterwards) are loaded into one float32 matrix, L2-normalized, and a
question is one matrix-vector product. At the per-person scale (10^4 to 10^5 messages)
that costs milliseconds (bench/vector_index.py compares sqlite-vec and usearch). The
matrices of recent searchers are kept in a cache bounded in bytes; a cheap
count/max(id) probe on the covering index tells whether a cached matrix is current,
only needs the newest rows appended, or must be reloaded (a merge, a prune, an edit).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, text

from hermes.state import engine as eng
from hermes.state.models import utcnow
from hermes.state.search import Neighbours

if TYPE_CHECKING:  # NumPy is loaded with the first vector: lexical-only Hermes never pays
    import numpy as np
    from numpy.typing import NDArray

    Matrix = NDArray[np.float32]

DEFAULT_CACHE_BYTES = 256 << 20
NEAREST = 1000  # ranked neighbours handed to the scope filters (they page through them)
MAD_TO_SD = 1.4826  # a normal distribution's standard deviation per median absolute deviation


class ModelChangedError(Exception):
    """The model in use is no longer the one these vectors were made with."""


@dataclass(frozen=True, slots=True)
class QueryVector:
    """A question's embedding, with the model that made it and how far that model can
    be trusted on the question's script (hermes/scripts.py: 1 reads it, 0 cannot)."""

    model: str
    values: Sequence[float]
    trust: float = 1.0


@dataclass(frozen=True, slots=True)
class Pending:
    message_id: int
    content: str


@dataclass(frozen=True, slots=True)
class VectorStatus:
    model: str | None  # the model in use (None: hybrid search never switched on)
    dim: int | None
    embedded: int  # vectors of that model
    queued: int  # messages waiting for one


# the lock (on PostgreSQL) of every write of the vector index: the model in use, its
# vectors and its queue (a model change rebuilds them all under it); other writes go on
VECTORS = ("vectors",)


class VectorDB:
    def __init__(self, db: eng.Handle, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.engine, self.patience = db.engine, db.patience
        self.cache = MatrixCache(cache_bytes)

    def activate(self, model: str) -> str | None:
        """Make `model` the one in use; returns the model that was in use before (None:
        hybrid search was never on). On a change, the other model's vectors are deleted
        and every message is queued (the first time too: existing history gets
        embedded)."""

        def work(session: Any) -> str | None:
            conn = session.connection()
            row = conn.execute(text("SELECT model FROM vector_model")).first()
            previous = None if row is None else str(row[0])
            if previous != model:
                _rebuild(conn, model, None)
            return previous

        return eng.with_retry(self.engine, work, self.patience, keys=VECTORS)

    def status(self) -> VectorStatus:
        with eng.reading(self.engine) as session:
            conn = session.connection()
            row = conn.execute(text("SELECT model, dim FROM vector_model")).first()
            queued = int(conn.execute(text("SELECT count(*) FROM embedding_queue")).scalar_one())
            if row is None:
                return VectorStatus(None, None, 0, queued)
            embedded = conn.execute(
                text("SELECT count(*) FROM message_vectors WHERE model = :m"), {"m": row[0]}
            ).scalar_one()
            return VectorStatus(row[0], row[1], int(embedded), queued)

    def pending(self, limit: int) -> list[Pending]:
        """Queued messages, newest first (live turns overtake a backfill)."""
        sql = (
            "SELECT q.message_id, m.content FROM embedding_queue q "
            "JOIN messages m ON m.id = q.message_id ORDER BY q.message_id DESC LIMIT :n"
        )
        with eng.reading(self.engine) as session:
            rows = session.connection().execute(text(sql), {"n": limit}).all()
        return [Pending(int(r[0]), str(r[1])) for r in rows]

    def store(
        self, model: str, embedded: Sequence[tuple[Pending, Sequence[float]]]
    ) -> tuple[int, bool]:
        """Save vectors made by `model` for queued messages; (stored, rebuilt).

        A vector is kept only while its message still has the text it was made from (an
        edit meanwhile queued it again), under the message's current owner. Vectors of a
        model no longer in use are dropped; a dimension other than the one in use means
        the model changed behind its name: rebuild, then keep these as the first ones."""
        if not embedded:
            return 0, False
        rows = [(item, _blob(vector)) for item, vector in embedded]
        dims = {len(blob) // 4 for _, blob in rows}
        if len(dims) != 1 or 0 in dims:
            raise ValueError("the embeddings endpoint returned vectors of different sizes")
        dim = dims.pop()

        def work(session: Any) -> tuple[int, bool]:
            conn = session.connection()
            row = conn.execute(text("SELECT model, dim FROM vector_model")).first()
            if row is None or row[0] != model:  # another process switched the model
                raise ModelChangedError(str(row[0]) if row else None)
            rebuilt = row[1] is not None and row[1] != dim
            if rebuilt:
                _rebuild(conn, model, dim)
            elif row[1] is None:
                conn.execute(text("UPDATE vector_model SET dim = :d"), {"d": dim})
            stored = 0
            for item, blob in rows:
                params = {"mid": item.message_id, "content": item.content}
                values = {**params, "model": model, "dim": dim, "v": blob}
                conn.execute(text(_UNSTORE), {"mid": item.message_id})
                if conn.execute(text(_STORE), values).rowcount:  # else edited: stays queued
                    stored += 1
                    conn.execute(text(_DEQUEUE), {"mid": item.message_id})
            return stored, rebuilt

        return eng.with_retry(self.engine, work, self.patience, keys=VECTORS)

    def skip(self, message_ids: Sequence[int]) -> None:
        """Take messages the endpoint refuses to embed off the queue (lexical search
        still finds them)."""

        def work(session: Any) -> None:
            for mid in message_ids:
                session.connection().execute(text(_DEQUEUE), {"mid": mid})

        eng.with_retry(self.engine, work, self.patience, keys=VECTORS)

    def nearest(
        self, conn: Connection, user_id: str, query: QueryVector, n: int = NEAREST
    ) -> Neighbours:
        """This user's `n` messages closest to `query` with their cosine similarity
        (above 0), closest first, and the similarity of their messages at large; no hits
        when the user has no vectors of that model or they have another dimension."""
        import numpy as np

        ids, matrix = self.cache.matrix(conn, user_id, query.model)
        q = np.asarray(query.values, dtype=np.float32)
        if not len(ids) or matrix.shape[1] != q.shape[0]:
            return Neighbours([], trust=query.trust)
        norm = float(np.linalg.norm(q))
        if norm == 0.0:
            return Neighbours([], trust=query.trust)
        scores = matrix @ (q / norm)
        k = min(n, len(ids))
        top = np.argpartition(-scores, k - 1)[:k]
        order = top[np.argsort(-scores[top], kind="stable")]
        order = order[scores[order] > 0.0]  # not similar at all: not a neighbour
        hits = [(int(i), float(v)) for i, v in zip(ids[order], scores[order], strict=True)]
        median = float(np.median(scores))
        spread = MAD_TO_SD * float(np.median(np.abs(scores - median)))
        return Neighbours(hits, median, spread, query.trust)


# a new vector replaces the old one as a new row (a new id: the caches see the change)
_UNSTORE = "DELETE FROM message_vectors WHERE message_id = :mid"
_STORE = (
    "INSERT INTO message_vectors(message_id, user_id, model, dim, vector) "
    "SELECT m.id, m.user_id, :model, :dim, :v FROM messages m "
    "WHERE m.id = :mid AND m.content = :content"
)


_DEQUEUE = "DELETE FROM embedding_queue WHERE message_id = :mid"


def _rebuild(conn: Connection, model: str, dim: int | None) -> None:
    conn.execute(text("DELETE FROM message_vectors"))
    conn.execute(text("DELETE FROM vector_model"))
    conn.execute(
        text("INSERT INTO vector_model(id, model, dim, changed_at) VALUES (1, :m, :d, :t)"),
        {"m": model, "d": dim, "t": eng.sql_time(utcnow())},
    )
    conn.execute(
        text(
            "INSERT INTO embedding_queue(message_id) SELECT id FROM messages "
            "WHERE role IN ('user', 'assistant') AND content <> '' ON CONFLICT DO NOTHING"
        )
    )


def _blob(vector: Sequence[float]) -> bytes:
    """float32, L2-normalized (a dot product is then the cosine similarity)."""
    import numpy as np

    values = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(values))
    return (values / norm if norm else values).tobytes()


@dataclass
class _Entry:
    ids: Any  # NDArray[np.int64]: message ids, row by row
    rows: Any  # Matrix with spare capacity; rows[:size] are in use
    size: int
    count: int  # vectors of the user and model when loaded
    last_id: int  # the highest message_vectors.id loaded

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.ids.nbytes)


class MatrixCache:
    """Per-(user, model) matrices of the most recent searchers, at most `budget` bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def matrix(self, conn: Connection, user_id: str, model: str) -> tuple[Any, Matrix]:
        key = (user_id, model)
        probe = conn.execute(
            text(
                "SELECT count(*), coalesce(max(id), 0) FROM message_vectors "
                "WHERE user_id = :u AND model = :m"
            ),
            {"u": user_id, "m": model},
        ).one()
        count, last_id = int(probe[0]), int(probe[1])
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is None or (entry.count, entry.last_id) != (count, last_id):
            entry = self._refresh(conn, key, entry, (count, last_id))
        with self._lock:
            self._entries[key] = entry
            self._evict()
        return entry.ids[: entry.size], entry.rows[: entry.size]

    def _refresh(
        self,
        conn: Connection,
        key: tuple[str, str],
        entry: _Entry | None,
        probe: tuple[int, int],
    ) -> _Entry:
        import numpy as np

        (user_id, model), (count, last_id) = key, probe
        after = entry.last_id if entry is not None else 0
        rows = conn.execute(
            text(
                "SELECT id, message_id, vector FROM message_vectors "
                "WHERE user_id = :u AND model = :m AND id > :after ORDER BY id"
            ),
            {"u": user_id, "m": model, "after": after},
        ).all()
        if entry is not None and entry.count + len(rows) == count:  # only new rows
            return _append(entry, rows, count, last_id)
        if entry is not None:  # something was deleted or moved: load everything
            return self._refresh(conn, key, None, probe)
        dims = {len(r[2]) for r in rows}
        if len(dims) > 1:  # one model, one dimension (store() guarantees it)
            raise eng.StateDBError("message_vectors holds vectors of different sizes")
        dim = dims.pop() // 4 if dims else 0
        ids = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
        matrix = matrix.reshape(len(rows), dim).copy() if dim else np.zeros((0, 0), np.float32)
        return _Entry(ids, matrix, len(rows), count, last_id)

    def _evict(self) -> None:
        total = sum(e.nbytes for e in self._entries.values())
        while total > self.budget and len(self._entries) > 1:
            _, old = self._entries.popitem(last=False)
            total -= old.nbytes
        if total > self.budget:  # one user bigger than the whole budget: not kept
            self._entries.clear()


def _append(entry: _Entry, rows: Sequence[Any], count: int, last_id: int) -> _Entry:
    """New vectors at the end of a cached matrix; capacity doubles when full."""
    import numpy as np

    if not rows:
        return _Entry(entry.ids, entry.rows, entry.size, count, last_id)
    dim = entry.rows.shape[1] if entry.size else len(rows[0][2]) // 4
    if any(len(r[2]) != dim * 4 for r in rows):
        raise eng.StateDBError("message_vectors holds vectors of different sizes")
    need = entry.size + len(rows)
    ids, matrix = entry.ids, entry.rows
    if need > len(matrix) or matrix.shape[1] != dim:
        capacity = max(need, 2 * len(matrix), 64)
        grown = np.zeros((capacity, dim), dtype=np.float32)
        grown[: entry.size] = matrix[: entry.size]
        grown_ids = np.zeros(capacity, dtype=np.int64)
        grown_ids[: entry.size] = ids[: entry.size]
        ids, matrix = grown_ids, grown
    block = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(-1, dim)
    matrix[entry.size : need] = block
    ids[entry.size : need] = [r[1] for r in rows]
    return _Entry(ids, matrix, need, count, last_id)


__all__ = [
    "ModelChangedError",
    "Pending",
    "QueryVector",
    "VectorDB",
    "VectorStatus",
]
