"""`hindsight`: a Hindsight server (self-hosted, or its cloud) through the official SDK
(`pip install '.[hindsight]'`: hindsight-client).

Per person: a memory bank each (`<prefix><user id>`; Hindsight makes a bank on its first
retain), so recall and reflect never reach another person's memories. A finished turn
is retained as a document of its own (its key as document id, so a replay replaces it
rather than adding a twin) and Hindsight extracts facts, entities and observations from
it; the built-in stores' entries are retained as one document each, keyed, with their
text and store in the metadata. Its own tool: `hindsight_reflect`, an answer reasoned
over everything in the person's bank. Hindsight has no session close.

The SDK is asynchronous (aiohttp): each person's instance keeps one client on the
process's one event loop for Hindsight (a thread of its own), and the blocking calls
here wait for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from hermes.providers.service import Kept, Note, ServiceProvider, tool, transcript

T = TypeVar("T")
PAGE = 100
MAX_PAGES = 50
RECALL_TOKENS = 1_024  # what a prefetch may bring back (Hindsight counts in tokens)


class _Loop:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="hindsight", daemon=True)
        self.thread.start()

    def run(self, work: Coroutine[Any, Any, T], timeout: float) -> T:
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g} s") from None


_LOOP: _Loop | None = None
_LOOP_LOCK = threading.Lock()


def _shared() -> _Loop:
    """The process's one loop for Hindsight clients (every person's instance keeps its
    client on it; a daemon thread, there while the process is)."""
    global _LOOP  # noqa: PLW0603 - made once, when first needed
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = _Loop()
        return _LOOP


class HindsightProvider(ServiceProvider):
    name = "hindsight"
    extra = "hindsight"  # its SDK (pyproject.toml)
    label = "Hindsight"
    needs = ("a server",)
    required = ("base_url",)
    key_env = "HINDSIGHT_API_KEY"
    _client: Any = None
    special_tool = tool(
        "hindsight_reflect",
        "Ask Hindsight to reason over everything it remembers about this user and answer "
        "a question (slower than a search; for questions that need several memories).",
        {"query": {"type": "string", "description": "The question."}},
    )

    def _with(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """`work` with the instance's client, on the loop of its own thread (the SDK is
        asyncio: the client's connection pool lives on one loop), waited for from any
        thread, bounded by the timeout."""
        return _shared().run(self._client_then(work), self.timeout + 5)

    async def _client_then(self, work: Callable[[Any], Awaitable[T]]) -> T:
        if self._client is None:
            from hindsight_client import Hindsight  # noqa: PLC0415 - imported only when used

            self._client = Hindsight(
                base_url=self.base_url,
                api_key=self.settings.get("api_key") or None,
                timeout=self.timeout,
                max_attempts=1,  # the outbox tries again, later
            )
        return await work(self._client)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                _shared().run(client.aclose(), 5)

    def ping(self) -> None:
        self._with(lambda c: c.aget_version())

    def search(self, space: str, query: str, limit: int) -> list[str]:
        answer = self._with(
            lambda c: c.arecall(bank_id=space, query=query, max_tokens=RECALL_TOKENS, budget="low")
        )
        return [result.text for result in answer.results][:limit]

    def ingest(self, space: str, session_id: str, key: str, messages: list[dict[str, str]]) -> None:
        self._with(
            lambda c: c.aretain(
                bank_id=space,
                content=transcript(messages),
                context="a conversation turn",
                document_id=key,
                metadata={"hermes_session": session_id},
                update_mode="replace",
            )
        )

    def put_note(self, space: str, note: Note) -> None:
        self._with(
            lambda c: c.aretain(
                bank_id=space,
                content=note.text,
                context=f"the assistant's {note.target} memory",
                document_id=note.key,
                metadata={
                    "hermes_key": note.key,
                    "hermes_target": note.target,
                    "hermes_text": note.text,
                },
                update_mode="replace",
            )
        )

    def notes(self, space: str) -> list[Note]:
        found: dict[str, Note] = {}
        for item in self._units(space):
            meta = item.metadata or {}
            if meta.get("hermes_key") and meta["hermes_key"] not in found:
                text = str(meta.get("hermes_text") or item.text or "")
                target = str(meta.get("hermes_target") or "memory")
                key = str(meta["hermes_key"])
                found[key] = Note(key, target, text, item.document_id or "")
        return list(found.values())

    def delete_note(self, space: str, note: Note) -> None:
        self._gone_is_done(lambda c: c.documents.delete_document(space, note.ref or note.key))

    def remember(self, space: str, text: str) -> None:
        self._with(
            lambda c: c.aretain(bank_id=space, content=text, context="a fact the user stated")
        )

    def export(self, space: str) -> list[Kept]:
        kept: list[Kept] = []
        notes: set[str] = set()
        for item in self._units(space):
            meta = item.metadata or {}
            if meta.get("hermes_key"):
                if meta["hermes_key"] not in notes:
                    notes.add(meta["hermes_key"])
                    text = str(meta.get("hermes_text") or item.text or "")
                    kept.append(Kept(text, str(meta.get("hermes_target") or "memory")))
            elif item.text:
                kept.append(Kept(item.text))
        return kept

    def drop(self, space: str) -> None:
        self._gone_is_done(lambda c: c.adelete_bank(space))

    def _gone_is_done(self, work: Callable[[Any], Awaitable[Any]]) -> None:
        """A delete whose target is already gone (404) is done (a replay)."""
        from hindsight_client_api.exceptions import NotFoundException  # noqa: PLC0415

        with contextlib.suppress(NotFoundException):
            self._with(work)

    def special(self, space: str, args: dict[str, Any]) -> dict[str, Any]:
        query = str(args["query"]).strip()
        if not query:
            raise ValueError("query is empty")
        answer = self._with(lambda c: c.areflect(bank_id=space, query=query, budget="low"))
        return {"success": True, "answer": answer.text}

    def _units(self, space: str) -> list[Any]:
        async def every(client: Any) -> list[Any]:
            units: list[Any] = []
            for page in range(MAX_PAGES):
                answer = await client.alist_memories(bank_id=space, limit=PAGE, offset=page * PAGE)
                units.extend(answer.items)
                if len(units) >= answer.total or not answer.items:
                    break
            return units

        return self._with(every)


__all__ = ["HindsightProvider"]
