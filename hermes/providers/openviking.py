"""`openviking`: an OpenViking server (self-hosted context database) through its
documented REST API (`/api/v1/...`, httpx: there is no separate client package; the
`openviking` package is the whole server).

Per person: OpenViking's own user field. Hermes is the trusted gateway in front of the
server (its `trusted` auth mode): every request names the account and the person
(`X-OpenViking-Account`, `X-OpenViking-User: <prefix><user id>`), and every path is the
person's home (`viking://~/...`), so the server scopes each call to that user. A finished
turn is two messages in the person's session (`<prefix><session id>`); the session's end
is a commit, when OpenViking extracts memories from it. The built-in stores' entries
are files under `viking://~/memories/hermes/` named by their key, and what the
`openviking_remember` tool stores goes beside them. Recall is `search/find` over the
person's memories. A link copies the person's memory files to the one who stays, then
deletes the sessions and memories of the one who is gone.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import quote

from hermes.providers.base import ConfigField
from hermes.providers.service import Kept, Note, ServiceError, ServiceProvider

NOTES = "viking://~/memories/hermes"
MEMORIES = "viking://~/memories"
MAX_FILES = 2_000


class OpenVikingProvider(ServiceProvider):
    name = "openviking"
    label = "OpenViking"
    needs = ("a server",)
    required = ("base_url",)
    key_env = "OPENVIKING_API_KEY"

    def extra_fields(self) -> list[ConfigField]:
        return [
            ConfigField(
                "account", "OpenViking account (workspace) id", default="default", kind="name"
            ),
            ConfigField(
                "agent_id", "Agent id sent with each request", default="hermes", kind="name"
            ),
        ]

    def http_options(self) -> dict[str, Any]:
        headers = {
            "X-OpenViking-Account": str(self.settings.get("account") or "default"),
            "X-OpenViking-Agent": str(self.settings.get("agent_id") or "hermes"),
        }
        if self.settings.get("api_key"):
            headers["X-API-Key"] = str(self.settings["api_key"])
        return {"base_url": self.base_url, "headers": headers, "timeout": self.timeout}

    def _call(self, space: str, method: str, path: str, **options: Any) -> Any:
        """One request as the person `space`: the envelope's `result`, or raises."""
        body = self.rest(method, path, headers={"X-OpenViking-User": space}, **options)
        if isinstance(body, dict) and body.get("status") == "error":
            raise ServiceError(200, str(body.get("error"))[:300])
        return body.get("result") if isinstance(body, dict) else body

    def ping(self) -> None:
        self.rest("GET", "/health")

    def search(self, space: str, query: str, limit: int) -> list[str]:
        found = self._call(
            space,
            "POST",
            "/api/v1/search/find",
            json={"query": query, "target_uri": MEMORIES, "limit": limit},
        )
        contexts = (found or {}).get("memories") or []
        texts = [str(c.get("abstract") or c.get("overview") or "") for c in contexts]
        return [t for t in texts if t][:limit]

    def ingest(self, space: str, session_id: str, key: str, messages: list[dict[str, str]]) -> None:
        session = self.space(session_id)
        try:
            self._call(space, "POST", "/api/v1/sessions", json={"session_id": session})
        except ServiceError as exc:
            if exc.status != 409:  # made by an earlier turn
                raise
        batch = [{"role": m["role"], "content": m["content"]} for m in messages if m["content"]]
        self._call(
            space,
            "POST",
            f"/api/v1/sessions/{quote(session)}/messages/batch",
            json={"messages": batch},
        )

    def end_session(self, space: str, session_id: str, messages: list[dict[str, Any]]) -> None:
        """A session's end is its commit: OpenViking archives it and extracts memories."""
        if not session_id:
            return
        try:
            self._call(
                space, "POST", f"/api/v1/sessions/{quote(self.space(session_id))}/commit", json={}
            )
        except ServiceError as exc:
            if exc.status != 404:  # a session with no turn was never made
                raise

    def put_note(self, space: str, note: Note) -> None:
        self._write(space, f"{NOTES}/{note.key}.md", note.text)

    def _write(self, space: str, uri: str, text: str) -> None:
        try:
            self._call(
                space,
                "POST",
                "/api/v1/content/write",
                json={"uri": uri, "content": text, "mode": "create"},
            )
        except ServiceError as exc:
            if exc.status != 409:  # that file is there: a replay
                raise

    def notes(self, space: str) -> list[Note]:
        found = []
        for uri in self._files(space, NOTES):
            key = uri.rsplit("/", 1)[-1].removesuffix(".md")
            target = _target(key)
            if target:
                found.append(Note(key, target, "", uri))
        return found

    def delete_note(self, space: str, note: Note) -> None:
        try:
            self._call(
                space, "DELETE", "/api/v1/fs", params={"uri": note.ref or f"{NOTES}/{note.key}.md"}
            )
        except ServiceError as exc:
            if exc.status != 404:  # gone already (a replay)
                raise

    def remember(self, space: str, text: str) -> None:
        digest = hashlib.sha256(text.encode()).hexdigest()[:24]
        self._write(space, f"{NOTES}/fact-{digest}.md", text)

    def export(self, space: str) -> list[Kept]:
        """The person's memory files: the notes and remembered facts, and what
        OpenViking extracted from their sessions."""
        kept = []
        for uri in self._files(space, MEMORIES, recursive=True):
            text = str(self._call(space, "GET", "/api/v1/content/read", params={"uri": uri}))
            key = uri.rsplit("/", 1)[-1].removesuffix(".md")
            kept.append(Kept(text, _target(key) if uri.startswith(NOTES) else None))
        return kept

    def drop(self, space: str) -> None:
        for session in self._call(space, "GET", "/api/v1/sessions") or []:
            sid = session.get("session_id") if isinstance(session, dict) else None
            if sid:
                self._call(space, "DELETE", f"/api/v1/sessions/{quote(str(sid))}")
        try:
            self._call(space, "DELETE", "/api/v1/fs", params={"uri": MEMORIES, "recursive": "true"})
        except ServiceError as exc:
            if exc.status != 404:
                raise

    def _files(self, space: str, folder: str, *, recursive: bool = False) -> list[str]:
        """The files under `folder` (home-relative `viking://~/...` uris)."""
        params: dict[str, Any] = {"uri": folder, "node_limit": MAX_FILES}
        if recursive:
            params["recursive"] = "true"
        try:
            listed = self._call(space, "GET", "/api/v1/fs/ls", params=params)
        except ServiceError as exc:
            if exc.status == 404:  # nothing written yet
                return []
            raise
        home = f"viking://user/{space}/"
        uris = []
        for entry in listed or []:
            if isinstance(entry, dict) and not entry.get("isDir"):
                uri = str(entry.get("uri") or f"{folder}/{entry['name']}")
                uris.append("viking://~/" + uri.removeprefix(home) if uri.startswith(home) else uri)
        return uris


def _target(key: str) -> str | None:
    """The store a note's key names (`hermes-user-...`), or None (not a note)."""
    parts = key.split("-")
    return (
        parts[1]
        if len(parts) >= 3 and parts[0] == "hermes" and parts[1] in ("memory", "user")
        else None
    )


__all__ = ["OpenVikingProvider"]
