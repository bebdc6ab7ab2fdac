"""Hybrid search for the recall benchmarks: the same Embedder the gateway runs, against
an OpenAI-compatible /v1/embeddings endpoint (bench/embed_server.py serves one offline),
or a model in this process (`url` "local", `model` a name of hermes/embedding_models.py
`LOCAL`: use-multilingual, e5-small).

`Hybrid(db, url, model)` embeds everything stored (timed: messages per second) and then
gives each question's vector through the reply path's own call (`Embedder.query`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

from gateway.app import build_embedder
from gateway.config import parse_config
from hermes.embedder import Embedder
from hermes.state import engine as eng
from hermes.state.db import SessionDB
from hermes.state.vectors import QueryVector

LOCAL = "local"


@dataclass
class Hybrid:
    db: SessionDB
    url: str
    model: str
    batch_size: int = 64
    embedder: Embedder = field(init=False)
    loop: asyncio.AbstractEventLoop = field(init=False, default_factory=asyncio.new_event_loop)

    def __post_init__(self) -> None:
        where = "    provider: local\n" if self.url == LOCAL else ""
        base = "http://127.0.0.1:9/v1" if self.url == LOCAL else self.url  # (the LLM: unused)
        config = parse_config(
            f"llm:\n  base_url: {base}\n  model: none\n"
            f"search:\n  embeddings:\n{where}    model: {self.model}\n"
            f"    batch_size: {self.batch_size}\n    query_timeout: 30\n",
            "bench",
        )
        embedder = build_embedder(config, self.db)
        assert embedder is not None
        self.embedder = embedder

    def embed_all(self) -> dict[str, Any]:
        started = time.perf_counter()
        count = self.loop.run_until_complete(self.embedder.drain())
        seconds = time.perf_counter() - started
        return {
            "embedded": count,
            "seconds": round(seconds, 1),
            "messages_per_s": round(count / seconds, 1) if seconds else None,
            "index_bytes": index_bytes(self.db),
        }

    def vector(self, question: str) -> QueryVector:
        found = self.loop.run_until_complete(self.embedder.query(question))
        assert found is not None, self.embedder.health.error
        return found

    def close(self) -> None:
        self.loop.run_until_complete(self.embedder.close())
        self.loop.close()


def index_bytes(db: SessionDB) -> int:
    """Pages of the vectors table and its indexes (SQLite's dbstat)."""
    with eng.reading(db.engine) as session:
        return int(
            session.connection()
            .execute(text("SELECT sum(pgsize) FROM dbstat WHERE name LIKE '%message_vectors%'"))
            .scalar_one()
            or 0
        )
