"""The embeddings model of hybrid search: a question's vector on the reply path, and the
background embedding of queued messages (hermes/state/vectors.py holds the vectors).

Nothing here is on the reply path except `query`: it waits at most
`search.embeddings.query_timeout` and, after a failure, is not tried again for
BREAKER_S, so an endpoint that is down costs one bounded wait, then nothing; the search
is lexical meanwhile. Messages are embedded off the reply path by `run` (the gateway
and the CLI chat start it) or by `drain` (`hermes sessions reindex --embeddings`), in
batches, newest first. An outage is one warning in the log and a line in `hermes
doctor` and the gateway status, never an error for a user.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hermes import scripts
from hermes.config import EmbeddingsConfig
from hermes.embedding_models import EmbeddingsModel
from hermes.llm.client import LLMError
from hermes.state.db import SessionDB
from hermes.state.vectors import ModelChangedError, Pending, QueryVector

logger = logging.getLogger(__name__)

MAX_CHARS = 8000  # a message's text sent for embedding (models truncate or refuse more)
BREAKER_S = 30.0  # after a failed question, questions go lexical this long
IDLE_POLL_S = 2.0  # the background task's look at the queue when it was empty
BACKOFF_S = (5.0, 300.0)  # the background task's wait after a failure, doubling
REFUSED = frozenset({400, 413, 422})  # the endpoint refuses the input, not the request
WEAK = 0.5  # a script the model reads worse than this is named in the status line


@dataclass
class Health:
    ok: bool = True
    since: float = 0.0  # monotonic time of the last change
    error: str = ""
    embedded: int = 0  # vectors stored by this process


class Embedder:
    def __init__(self, backend: EmbeddingsModel, db: SessionDB, config: EmbeddingsConfig) -> None:
        self.backend = backend
        self.db = db
        self.config = config
        self.health = Health(since=time.monotonic())
        self._broken_until = 0.0
        self._activated = False
        # how well the model reads each script (hermes/scripts.py): known for a local
        # model (measured when it was chosen), else measured at activation
        self.coverage: dict[str, float] | None = (
            dict(backend.coverage) if backend.coverage is not None else None
        )
        db.vectors.cache.budget = config.cache_mb << 20
        # whether this process embeds the queue now (with several gateways on one
        # database, the maintenance leader does; the others only wait)
        self.may_run: Callable[[], bool] = lambda: True

    @property
    def model(self) -> str:
        """What its vectors are kept under: the model's name (and its documents' marks)."""
        return self.backend.name

    async def close(self) -> None:
        await self.backend.close()

    async def query(self, text: str) -> QueryVector | None:
        """The question's embedding, or None (search stays lexical) when the endpoint
        fails, is slow, or failed within the last BREAKER_S."""
        if not text.strip() or time.monotonic() < self._broken_until:
            return None
        try:
            vectors = await self.backend.embed(
                [text[:MAX_CHARS]], query=True, timeout=self.config.query_timeout, retries=0
            )
        except Exception as exc:  # LLMError, or a bug: the search goes on without it
            self._broken_until = time.monotonic() + BREAKER_S
            self._failed(str(exc) if isinstance(exc, LLMError) else type(exc).__name__)
            return None
        self._recovered()
        return QueryVector(self.model, vectors[0], scripts.trust(text, self.coverage))

    async def drain(
        self,
        *,
        progress: Callable[[int], None] | None = None,
        stop: asyncio.Event | None = None,
    ) -> int:
        """Embed queued messages until the queue is empty (or `stop` is set); returns how
        many were stored. `progress` gets each batch's count. Raises LLMError when the
        endpoint fails (what was stored stays)."""
        if not self._activated:  # once: it takes the write lock
            await asyncio.to_thread(self.db.vectors.activate, self.model)
            if self.coverage is None:
                self.coverage = await self.measure_coverage()
            self._activated = True
        total = 0
        while stop is None or not stop.is_set():
            batch = await asyncio.to_thread(self.db.vectors.pending, self.backend.batch)
            if not batch:
                break
            try:
                stored = await self._embed_batch(batch)
            except ModelChangedError as exc:  # another Hermes with another model: take it
                logger.warning(  # back at the next pass (two configs disagree)
                    "embeddings model changed to %s by another process; using %s again",
                    exc,
                    self.model,
                )
                self._activated = False
                break
            total += stored
            if progress is not None:
                progress(len(batch))
        return total

    async def run(self, stop: asyncio.Event) -> None:
        """The background task: drain, wait for new messages, back off on failures."""
        delay = BACKOFF_S[0]
        while not stop.is_set():
            try:
                if self.may_run():
                    await self.drain(stop=stop)
                delay = BACKOFF_S[0]
                wait = IDLE_POLL_S
            except LLMError as exc:
                self._failed(str(exc))
                wait, delay = delay, min(delay * 2, BACKOFF_S[1])
            except Exception:  # a damaged or locked state.db: logged, tried again later
                logger.exception("embedding messages failed")
                wait, delay = delay, min(delay * 2, BACKOFF_S[1])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)

    async def measure_coverage(self) -> dict[str, float]:
        """How well the model tells paraphrases apart in each script (hermes/scripts.py):
        each script's probe pairs embedded once, in batches; a script whose text the
        endpoint refuses counts as unread. Raises LLMError when the endpoint fails."""
        coverage: dict[str, float] = {}
        for script, pairs in scripts.PROBES.items():
            texts = [a for a, _ in pairs] + [b for _, b in pairs]
            try:
                vectors: list[list[float]] = []
                for start in range(0, len(texts), self.backend.batch):
                    batch = texts[start : start + self.backend.batch]
                    found = await self.backend.embed(batch, query=False)
                    vectors.extend(list(v) for v in found)
            except LLMError as exc:
                if exc.status not in REFUSED:
                    raise
                vectors = []
            coverage[script] = scripts.separation(vectors) if vectors else 0.0
        logger.info("embeddings model %s reads: %s", self.model, describe(coverage))
        return coverage

    async def _embed_batch(self, batch: Sequence[Pending]) -> int:
        texts = [item.content[:MAX_CHARS] for item in batch]
        blank = {item.message_id for item, t in zip(batch, texts, strict=True) if not t.strip()}
        if blank:
            await asyncio.to_thread(self.db.vectors.skip, sorted(blank))
            batch = [item for item in batch if item.message_id not in blank]
            texts = [t for t in texts if t.strip()]
        if not batch:
            return 0
        try:
            vectors = await self.backend.embed(texts, query=False)
        except LLMError as exc:
            if exc.status not in REFUSED:
                raise
            if len(batch) == 1:  # this text is refused: lexical search still finds it
                logger.warning(
                    "embeddings model refused message %d (%s); it stays lexical only",
                    batch[0].message_id,
                    exc,
                )
                await asyncio.to_thread(self.db.vectors.skip, [batch[0].message_id])
                return 0
            stored = 0
            for item in batch:  # find the text it refuses
                stored += await self._embed_batch([item])
            return stored
        self._recovered()
        pairs = list(zip(batch, vectors, strict=True))
        stored, rebuilt = await asyncio.to_thread(self.db.vectors.store, self.model, pairs)
        if rebuilt:
            logger.warning(
                "embeddings model %s now returns %d dimensions: vectors are rebuilt",
                self.model,
                len(vectors[0]),
            )
        self.health.embedded += stored
        return stored

    def _failed(self, error: str) -> None:
        if self.health.ok:
            logger.warning(
                "embeddings model %s %s failed (%s): search is lexical until it answers again",
                self.model,
                self.backend.where,
                error,
            )
            self.health = Health(False, time.monotonic(), error, self.health.embedded)
        else:
            self.health.error = error

    def _recovered(self) -> None:
        if not self.health.ok:
            logger.info("embeddings model %s answers again: hybrid search is back", self.model)
            self.health = Health(True, time.monotonic(), "", self.health.embedded)
            self._broken_until = 0.0

    def status_line(self) -> str:
        """One line for `hermes doctor` and the gateway status."""
        status = self.db.vectors.status()
        where = f"{self.model} {self.backend.where}"
        counts = f"{status.embedded:,} messages embedded, {status.queued:,} queued"
        weak = [name for name, score in (self.coverage or {}).items() if score < WEAK]
        if weak:
            counts += f"; weighed down in {', '.join(weak)} text (it does not read them)"
        if not self.health.ok:
            ago = time.monotonic() - self.health.since
            return (
                f"failing for {ago:.0f} s ({self.health.error}); search is lexical meanwhile "
                f"({where}; {counts})"
            )
        return f"on ({where}; {counts})"


def describe(coverage: dict[str, float]) -> str:
    return ", ".join(f"{name} {score:.2f}" for name, score in coverage.items())


__all__ = ["Embedder", "Health", "describe"]
