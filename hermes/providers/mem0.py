"""`mem0`: Mem0 (the hosted platform, or a server speaking its API) through the official
SDK (`pip install '.[mem0]'`: mem0ai, `MemoryClient`).

Per person: every memory carries our person's namespace as Mem0's `user_id`; searches
and listings filter on it. A finished turn is added as messages and Mem0 extracts what
it keeps (its strength: server-side extraction); the built-in stores' entries are added
verbatim (`infer: false`) with their key in the metadata. Mem0 has no session close.
The SDK's telemetry (PostHog) is switched off before it is imported (gateway/config.py
sets MEM0_TELEMETRY=False and MEM0_DIR under HERMES_HOME for the process).
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx

from hermes.providers.service import Kept, Note, ServiceProvider

PAGE_SIZE = 100
MAX_PAGES = 50  # 5,000 memories per person listed at most


class Mem0Provider(ServiceProvider):
    name = "mem0"
    extra = "mem0"  # its SDK (pyproject.toml)
    label = "Mem0"
    needs = ("a cloud key",)
    required = ("api_key",)
    key_env = "MEM0_API_KEY"
    default_url = "https://api.mem0.ai"

    @property
    def client(self) -> Any:
        """The person's SDK client, made when first needed (made by asking the server:
        GET /v1/ping/)."""
        return self.connected(self._make)

    def _make(self, http: httpx.Client) -> Any:
        from mem0 import MemoryClient  # noqa: PLC0415 - imported only when it is used

        return MemoryClient(api_key=self.settings.get("api_key"), host=self.base_url, client=http)

    def ping(self) -> None:
        with httpx.Client(timeout=self.timeout) as http:
            self._make(http)

    def warm(self) -> None:
        self.client  # noqa: B018 - the kept client: made by asking the server

    def search(self, space: str, query: str, limit: int) -> list[str]:
        found = self.client.search(query, filters={"user_id": space}, top_k=limit)
        return [str(item.get("memory", "")) for item in _results(found)][:limit]

    def ingest(self, space: str, session_id: str, key: str, messages: list[dict[str, str]]) -> None:
        metadata = {"hermes_session": session_id, "hermes_turn": key}
        self.client.add(messages, user_id=space, metadata=metadata)

    def put_note(self, space: str, note: Note) -> None:
        metadata = {"hermes_key": note.key, "hermes_target": note.target}
        message = [{"role": "user", "content": note.text}]
        self.client.add(message, user_id=space, infer=False, metadata=metadata)

    def notes(self, space: str) -> list[Note]:
        return [
            Note(meta["hermes_key"], meta.get("hermes_target", "memory"), text, ref)
            for ref, text, meta in self._all(space)
            if meta.get("hermes_key")
        ]

    def delete_note(self, space: str, note: Note) -> None:
        from mem0.exceptions import MemoryNotFoundError  # noqa: PLC0415 - imported when used

        with contextlib.suppress(MemoryNotFoundError):  # gone already (a replay)
            self.client.delete(note.ref)

    def remember(self, space: str, text: str) -> None:
        message = [{"role": "user", "content": text}]
        self.client.add(message, user_id=space, infer=False, metadata={"hermes": "remembered"})

    def export(self, space: str) -> list[Kept]:
        return [
            Kept(text, meta.get("hermes_target") if meta.get("hermes_key") else None)
            for _, text, meta in self._all(space)
        ]

    def drop(self, space: str) -> None:
        self.client.delete_all(user_id=space)

    def _all(self, space: str) -> list[tuple[str, str, dict[str, Any]]]:
        found = []
        for page in range(1, MAX_PAGES + 1):
            answer = self.client.get_all(filters={"user_id": space}, page=page, page_size=PAGE_SIZE)
            items = _results(answer)
            for item in items:
                meta = item.get("metadata") or {}
                found.append((str(item["id"]), str(item.get("memory", "")), meta))
            if not _more(answer, len(items), len(found)):
                break
        return found


def _more(answer: Any, page: int, so_far: int) -> bool:
    """Whether a listing goes on past this page: its `next` says so where the answer has
    one (the SDK's paged form); a form without it (the API reference's `results` and
    `total`) goes on while pages come full and the total is not reached."""
    if isinstance(answer, dict) and "next" in answer:
        return bool(answer["next"])
    if page < PAGE_SIZE:
        return False
    total = answer.get("total") if isinstance(answer, dict) else None
    return not isinstance(total, int) or total > so_far  # a full page: there may be more


def _results(answer: Any) -> list[dict[str, Any]]:
    items = answer.get("results", []) if isinstance(answer, dict) else answer
    return [item for item in items or [] if isinstance(item, dict)]


__all__ = ["Mem0Provider"]
