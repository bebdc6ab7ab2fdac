"""`retaindb`: RetainDB (its cloud API) over REST with httpx (no Python SDK is
published). The routes are those RetainDB's API serves under /v1 (memory add, search,
delete, session ingest, the user profile and its `ask`), authenticated with a bearer
key; every call names the project and the person.

Per person: RetainDB's own `user_id` field, set to `<prefix><user id>` in every body
and profile path. A finished turn is ingested as a session (RetainDB extracts memories
from it); the built-in stores' entries are memories worded so their store shows (the
API keeps text, not our tags), which is how a replace or remove finds them. Its own
tool: `retaindb_ask`, a question answered from RetainDB's model of the person. A link
copies the person's memories to the one who stays and deletes them from the one who
is gone. No session close.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from hermes.providers.base import ConfigField
from hermes.providers.service import (
    Kept,
    Note,
    ServiceError,
    ServiceProvider,
    note_key,
    tool,
    unworded,
    worded,
)

HOSTED = "https://api.retaindb.com"
LISTED = 500  # a person's memories listed at most (a link, a replace)


class RetainDBProvider(ServiceProvider):
    name = "retaindb"
    label = "RetainDB"
    needs = ("a cloud key",)
    required = ("api_key",)
    key_env = "RETAINDB_API_KEY"
    default_url = HOSTED
    special_tool = tool(
        "retaindb_ask",
        "Ask RetainDB what it has learned about this user (answered from its model of "
        "them, not a search).",
        {"query": {"type": "string", "description": "The question about the user."}},
    )

    def extra_fields(self) -> list[ConfigField]:
        return [
            ConfigField(
                "project", "RetainDB project (the data partition)", default="hermes", kind="name"
            )
        ]

    @property
    def project(self) -> str:
        return str(self.settings.get("project") or "hermes")

    def http_options(self) -> dict[str, Any]:
        key = str(self.settings.get("api_key") or "")
        headers = {"Authorization": f"Bearer {key}"}
        return {"base_url": self.base_url, "headers": headers, "timeout": self.timeout}

    def _call(self, method: str, path: str, **options: Any) -> Any:
        return self.rest(method, path, **options)

    def _profile(self, space: str) -> list[dict[str, Any]]:
        answer = self._call(
            "GET",
            f"/v1/memory/profile/{quote(space, safe='')}",
            params={"project": self.project, "include_pending": "true"},
        )
        memories = answer.get("memories") if isinstance(answer, dict) else None
        return [m for m in memories or [] if isinstance(m, dict)][:LISTED]

    def ping(self) -> None:
        self._profile(self.space("ping"))

    def search(self, space: str, query: str, limit: int) -> list[str]:
        body = {
            "project": self.project,
            "user_id": space,
            "query": query,
            "top_k": limit,
            "include_pending": True,
        }
        answer = self._call("POST", "/v1/memory/search", json=body)
        results = answer.get("results") if isinstance(answer, dict) else None
        texts = [_content(r) for r in results or [] if isinstance(r, dict)]
        return [t for t in texts if t][:limit]

    def ingest(self, space: str, session_id: str, key: str, messages: list[dict[str, str]]) -> None:
        body = {
            "project": self.project,
            "user_id": space,
            "session_id": self.space(session_id),
            "messages": messages,
            "write_mode": "sync",
        }
        self._call("POST", "/v1/memory/ingest/session", json=body)

    def _add(self, space: str, content: str, kind: str) -> None:
        body = {
            "project": self.project,
            "user_id": space,
            "content": content,
            "memory_type": kind,
            "write_mode": "sync",
        }
        self._call("POST", "/v1/memory", json=body)

    def put_note(self, space: str, note: Note) -> None:
        self._add(space, worded(note), "preference" if note.target == "user" else "factual")

    def notes(self, space: str) -> list[Note]:
        found = []
        for memory in self._profile(space):
            target, text = unworded(str(memory.get("content") or ""))
            if target is not None:
                found.append(Note(note_key(target, text), target, text, str(memory["id"])))
        return found

    def delete_note(self, space: str, note: Note) -> None:
        self._delete(note.ref)

    def _delete(self, memory_id: str) -> None:
        try:
            self._call("DELETE", f"/v1/memory/{quote(memory_id, safe='')}")
        except ServiceError as exc:
            if exc.status != 404:  # gone already (a replay)
                raise

    def remember(self, space: str, text: str) -> None:
        self._add(space, text, "factual")

    def export(self, space: str) -> list[Kept]:
        kept = []
        for memory in self._profile(space):
            target, text = unworded(str(memory.get("content") or ""))
            if text:
                kept.append(Kept(text, target))
        return kept

    def drop(self, space: str) -> None:
        for memory in self._profile(space):
            self._delete(str(memory["id"]))

    def special(self, space: str, args: dict[str, Any]) -> dict[str, Any]:
        query = str(args["query"]).strip()
        if not query:
            raise ValueError("query is empty")
        answer = self._call(
            "POST",
            f"/v1/memory/profile/{quote(space, safe='')}/ask",
            json={"project": self.project, "query": query, "reasoning_level": "low"},
        )
        text = answer.get("answer") if isinstance(answer, dict) else None
        return {"success": True, "answer": text or "RetainDB knows nothing about that yet."}


__all__ = ["RetainDBProvider"]


def _content(result: dict[str, Any]) -> str:
    """A search result's text: the memory it holds under "memory" (the API reference,
    retaindb.com/docs/api/memory), or the result itself where a server answers flat."""
    memory = result.get("memory")
    found = memory if isinstance(memory, dict) else result
    return str(found.get("content") or "")
