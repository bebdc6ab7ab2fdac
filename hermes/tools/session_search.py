"""The `session_search` tool: the agent searches its own past conversations with one user.

Hits are grouped by session, the current session is left out, and the top `limit`
sessions come back with their matching snippets and a summary focused on the query,
written by an auxiliary model when one is configured. Without one, or when it fails or
times out, each result carries a raw excerpt around its best match, marked as such.
The tool never raises.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from hermes import metrics
from hermes.state.db import SessionDB
from hermes.state.models import ChatSession
from hermes.state.search import MessageHit, SearchScope
from hermes.state.vectors import QueryVector

logger = logging.getLogger(__name__)

DEFAULT_LIMIT, MAX_LIMIT = 3, 10
MESSAGE_HITS = 60  # ranked messages considered before grouping by session
SNIPPETS_PER_SESSION = 3
SNIPPET_RADIUS = 90
EXCERPT_RADIUS = 300
SUMMARY_INPUT_CHARS = 6000
ROLES = ("user", "assistant")

SESSION_SEARCH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "session_search",
        "description": (
            "Search your past conversations with this user (all platforms and the CLI). "
            "Use it when the user refers to something discussed before that is not in your "
            "memory. Returns the best-matching sessions with snippets and a summary. An "
            "empty query lists the most recent sessions."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                "platform": {
                    "type": "string",
                    "description": "Only this platform (e.g. telegram).",
                },
                "role": {"type": "string", "enum": list(ROLES)},
            },
            "required": [],
            "additionalProperties": False,
        },
    },
}


class Summarizer(Protocol):
    async def summarize(self, query: str, excerpt: str) -> str: ...


class Reranker(Protocol):
    """The candidates' indexes, best first (hermes/llm/reranker.py)."""

    async def rank(self, query: str, candidates: list[str]) -> list[int]: ...


class QueryEmbedder(Protocol):
    """Hybrid search (hermes/embedder.py): the question's vector, or None to stay lexical."""

    async def query(self, text: str) -> QueryVector | None: ...


@dataclass(frozen=True, slots=True)
class SummaryPolicy:
    """The search side task's bounds: its summaries and, with a reranker, the reranking."""

    concurrency: int = 3
    timeout_s: float = 20.0
    rerank_candidates: int = 20
    rerank_timeout_s: float = 10.0


class SessionSearchTool:
    name = "session_search"
    schema = SESSION_SEARCH_SCHEMA

    def __init__(
        self,
        db: SessionDB,
        scope: SearchScope,
        summarizer: Summarizer | None = None,
        policy: SummaryPolicy = SummaryPolicy(),
        *,
        embedder: QueryEmbedder | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        self.db = db
        self.scope = scope
        self.summarizer = summarizer
        self.policy = policy
        self.embedder = embedder
        self.reranker = reranker

    async def run(self, args: Mapping[str, Any]) -> dict[str, Any]:
        with metrics.SEARCH_SECONDS.time():
            return await self._run(args)

    async def _run(self, args: Mapping[str, Any]) -> dict[str, Any]:
        try:
            query, limit, scope = self._parse(args)
        except ValueError as exc:
            return {"success": False, "error": str(exc)}
        try:
            if not query.strip():
                return await self.db.run(self._recent, scope, limit)
            return await self._search(query, limit, scope)
        except Exception as exc:  # the tool answers, never raises into the agent loop
            logger.exception("session_search failed")
            return {"success": False, "error": f"Search failed: {type(exc).__name__}"}

    def _parse(self, args: Mapping[str, Any]) -> tuple[str, int, SearchScope]:
        query = args.get("query") or ""
        if not isinstance(query, str):
            raise ValueError("'query' must be a string.")
        limit = args.get("limit", DEFAULT_LIMIT)
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ValueError(f"'limit' must be an integer from 1 to {MAX_LIMIT}.")
        role = args.get("role")
        if role is not None and role not in ROLES:
            raise ValueError("'role' must be 'user' or 'assistant'.")
        platform = args.get("platform") or None
        if platform is not None and not isinstance(platform, str):
            raise ValueError("'platform' must be a string.")
        scope = replace(
            self.scope, platform=platform or self.scope.platform, role=role or self.scope.role
        )
        return query, max(1, min(limit, MAX_LIMIT)), scope

    def _recent(self, scope: SearchScope, limit: int) -> dict[str, Any]:
        sessions = [
            s
            for s in self.db.conversations.list_sessions(
                scope.user_id, scope.platform, limit + 1, chat_id=scope.chat_id
            )
            if s.id != scope.exclude_session_id
        ][:limit]
        return {
            "success": True,
            "mode": "recent",
            "results": [self._recent_entry(s, scope) for s in sessions],
        }

    def _recent_entry(self, chat: ChatSession, scope: SearchScope) -> dict[str, Any]:
        messages = self.db.conversations.messages(chat.id, scope.user_id)
        preview = next((m.content for m in messages if m.role == "user" and m.content), "")
        return {
            "session_id": chat.id,
            "platform": chat.platform,
            "title": chat.title,
            "last_active": chat.last_active_at.date().isoformat(),
            "message_count": chat.message_count,
            "preview": _clip(preview, 160),
        }

    async def _search(self, query: str, limit: int, scope: SearchScope) -> dict[str, Any]:
        vector = await self.embedder.query(query) if self.embedder is not None else None
        hits = await self.db.run(
            self.db.conversations.search, scope, query, MESSAGE_HITS, vector=vector
        )
        hits = await self._reranked(query, hits)
        results = await self.db.run(self._found, hits, limit, scope)
        await self._summarize(query, results)
        return {"success": True, "query": query, "count": len(results), "results": results}

    async def _reranked(self, query: str, hits: list[MessageHit]) -> list[MessageHit]:
        """With a reranker, the best `rerank_candidates` hits in the model's order (the
        rest after them); as they were when it fails or takes too long."""
        head = hits[: self.policy.rerank_candidates]
        if self.reranker is None or len(head) < 2:
            return hits
        try:
            order = await asyncio.wait_for(
                self.reranker.rank(query, [h.content for h in head]),
                self.policy.rerank_timeout_s,
            )
        except Exception as exc:  # the fused order stands
            logger.warning("search rerank failed (%s); the fused order stands", exc)
            return hits
        chosen = [head[i] for i in dict.fromkeys(order) if 0 <= i < len(head)]
        chosen += [h for h in head if h not in chosen]
        return chosen + hits[len(head) :]

    def _found(
        self, hits: list[MessageHit], limit: int, scope: SearchScope
    ) -> list[dict[str, Any]]:
        """The best `limit` sessions of `hits`, each with its snippets and the context to
        summarize (the reads, on the database executor)."""
        grouped: dict[str, list[MessageHit]] = {}
        for hit in hits:
            grouped.setdefault(hit.session_id, []).append(hit)
        top = list(grouped.items())[:limit]
        return [self._result(session_id, session_hits, scope) for session_id, session_hits in top]

    def _result(
        self, session_id: str, hits: list[MessageHit], scope: SearchScope
    ) -> dict[str, Any]:
        chat = self.db.conversations.get_session(session_id, scope.user_id)
        assert chat is not None  # hits are already confined to this user
        best = hits[0]
        return {
            "session_id": chat.id,
            "platform": chat.platform,
            "when": chat.started_at.date().isoformat(),
            "title": chat.title,
            "snippets": [
                f"{h.role}: {snippet(h.content, h.terms, SNIPPET_RADIUS)}"
                for h in hits[:SNIPPETS_PER_SESSION]
            ],
            "_context": self._context(chat, best, scope),
            "_excerpt": snippet(best.content, best.terms, EXCERPT_RADIUS),
        }

    def _context(self, chat: ChatSession, best: MessageHit, scope: SearchScope) -> str:
        """The conversation around the best hit, bounded, for the summarizer."""
        messages = [
            m for m in self.db.conversations.messages(chat.id, scope.user_id) if m.role in ROLES
        ]
        index = next((i for i, m in enumerate(messages) if m.id == best.message_id), 0)
        window = messages[max(0, index - 4) : index + 5]
        return _clip("\n".join(f"{m.role}: {m.content}" for m in window), SUMMARY_INPUT_CHARS)

    async def _summarize(self, query: str, results: list[dict[str, Any]]) -> None:
        gate = asyncio.Semaphore(max(1, self.policy.concurrency))

        async def one(result: dict[str, Any]) -> None:
            context, excerpt = result.pop("_context"), result.pop("_excerpt")
            if self.summarizer is None:
                result["excerpt"], result["summary_note"] = (
                    excerpt,
                    "raw excerpt (no summary model)",
                )
                return
            try:
                async with gate:
                    summary = await asyncio.wait_for(
                        self.summarizer.summarize(query, context), self.policy.timeout_s
                    )
                result["summary"] = summary.strip()
            except Exception as exc:
                reason = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
                logger.warning("session summary failed: %s", reason)
                result["excerpt"] = excerpt
                result["summary_note"] = f"raw excerpt (summary {reason})"

        await asyncio.gather(*(one(result) for result in results))


def snippet(content: str, terms: tuple[str, ...], radius: int) -> str:
    """A window of `content` around the first occurrence of a query term."""
    folded = content.casefold()
    position = -1
    for term in terms:
        needle = term.casefold()
        for candidate in (needle, needle[: max(4, len(needle) - 3)]):
            position = folded.find(candidate)
            if position >= 0:
                break
        if position >= 0:
            break
    position = max(position, 0)
    start, end = max(0, position - radius), min(len(content), position + radius)
    text = " ".join(content[start:end].split())
    return ("…" if start > 0 else "") + text + ("…" if end < len(content) else "")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["QueryEmbedder", "SessionSearchTool", "Summarizer", "snippet"]
