"""`supermemory`: Supermemory (the hosted API, or a server speaking it) through the
official SDK (`pip install '.[supermemory]'`: supermemory).

Per person: a Supermemory namespace each (`<prefix><user id>`): every document, search,
profile and listing names it, so nothing is shared between people (the peer's plugin
kept one container per agent). A finished turn is a document with its key as id (a
replay finds it there and sends nothing: a reused id would append); Supermemory learns
memories from it. The built-in stores' entries are documents too, keyed, their store in the
metadata. Its own tool: `supermemory_profile`, the continuously kept profile of the
person (stable facts and current context), no search needed. A link copies the
documents to the one who stays and deletes the namespace of the one who is gone. No
session close.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx

from hermes.providers.service import Kept, Note, ServiceProvider, tool, transcript

HOSTED = "https://api.supermemory.ai"
PAGE = 100
MAX_PAGES = 50


class SupermemoryProvider(ServiceProvider):
    name = "supermemory"
    extra = "supermemory"  # its SDK (pyproject.toml)
    label = "Supermemory"
    needs = ("a cloud key",)
    required = ("api_key",)
    key_env = "SUPERMEMORY_API_KEY"
    default_url = HOSTED
    special_tool = tool(
        "supermemory_profile",
        "Read Supermemory's profile of this user: their stable facts and current context, "
        "kept up to date from everything they said (no search needed). Optional focus.",
        {"focus": {"type": "string", "description": "A topic to keep to, or ''."}},
    )

    @property
    def client(self) -> Any:
        return self.connected(self._make)

    def _make(self, http: httpx.Client) -> Any:
        from supermemory import Supermemory  # noqa: PLC0415 - imported only when it is used

        return Supermemory(
            api_key=str(self.settings.get("api_key")),
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,  # the outbox tries again, later
            httpx_client=http,
        )

    def ping(self) -> None:
        self.client.namespaces.list(limit=1)

    def search(self, space: str, query: str, limit: int) -> list[str]:
        answer = self.client.search(space, query=query, limit=limit, search_mode="hybrid")
        found = [r.memory or r.chunk or "" for r in answer.results]
        return [text for text in found if text][:limit]

    def ingest(self, space: str, session_id: str, key: str, messages: list[dict[str, str]]) -> None:
        self._add(space, transcript(messages), key, {"hermes_session": session_id})

    def put_note(self, space: str, note: Note) -> None:
        meta = {"hermes_key": note.key, "hermes_target": note.target}
        self._add(space, note.text, note.key, meta)

    def _add(self, space: str, content: str, key: str | None, meta: dict[str, Any]) -> None:
        """A document; one with our key only when no document has that key yet: the
        service *appends* to a document whose id is reused (its SDK says so), so a
        replayed turn sent again would be stored twice."""
        if key is None:
            self.client.add(space, content=content, metadata=meta)
        elif not self._has(space, key):
            self.client.add(space, content=content, id=key, metadata=meta)

    def _has(self, space: str, key: str) -> bool:
        from supermemory.errors import NotFoundError  # noqa: PLC0415 - imported when used

        try:
            self.client.documents.get(space, key)
        except NotFoundError:
            return False
        return True

    def notes(self, space: str) -> list[Note]:
        return [
            Note(
                str(d.metadata["hermes_key"]),
                str(d.metadata.get("hermes_target")),
                d.content or "",
                d.id,
            )
            for d in self._documents(space)
            if (d.metadata or {}).get("hermes_key")
        ]

    def delete_note(self, space: str, note: Note) -> None:
        self.client.documents.delete(space, ids=[note.key])

    def remember(self, space: str, text: str) -> None:
        self._add(space, text, None, {"hermes": "remembered"})

    def export(self, space: str) -> list[Kept]:
        kept = []
        for document in self._documents(space):
            meta = document.metadata or {}
            if document.content:
                target = str(meta["hermes_target"]) if meta.get("hermes_key") else None
                kept.append(Kept(document.content, target))
        return kept

    def drop(self, space: str) -> None:
        from supermemory.errors import NotFoundError  # noqa: PLC0415 - imported when used

        with contextlib.suppress(NotFoundError):  # never made, or gone already
            self.client.namespaces.delete(space)

    def special(self, space: str, args: dict[str, Any]) -> dict[str, Any]:
        profile = self.client.profile(space).profile
        facts = [f.memory for f in [*profile.static, *profile.dynamic]]
        focus = str(args.get("focus") or "").casefold().split()
        if focus:
            facts = [f for f in facts if any(word in f.casefold() for word in focus)] or facts
        return {"success": True, "profile": facts}

    def _documents(self, space: str) -> list[Any]:
        found: list[Any] = []
        for page in range(1, MAX_PAGES + 1):
            answer = self.client.list(  # content is null unless asked for (the SDK's types)
                space, type="documents", page=page, limit=PAGE, include={"content": True}
            )
            found.extend(answer.documents)
            if page >= (answer.pagination.total_pages or 1):
                break
        return found


__all__ = ["SupermemoryProvider"]
