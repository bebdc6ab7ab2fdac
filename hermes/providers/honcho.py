"""`honcho`: Honcho (self-hosted, or the hosted service) through the official SDK
(`pip install '.[honcho]'`: honcho-ai).

Per person: a Honcho peer each (`<prefix><user id>`) in the configured workspace, and
one peer for the assistant; the peer's sessions are ours (`<prefix><session id>`), with
the person and the assistant in them. A finished turn is two messages in the session
(Honcho reasons over them into conclusions about the person); the built-in stores'
entries are the person's conclusions about themselves, worded so their store shows
("From the user's profile: ..."), which is how a replace or remove finds them again.
Recall is Honcho's semantic search over the person's conclusions, then over what they
said. Its own tool: `honcho_ask`, a question to Honcho's dialectic about the person
(what it has modelled of them, not a search). A link copies the person's conclusions
and messages to the one who stays (the messages into a session of their own), then
deletes the sessions and conclusions of the one who is gone. No session close.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx

from hermes.providers.base import ConfigField
from hermes.providers.service import (
    Kept,
    Note,
    ServiceProvider,
    note_key,
    tool,
    unworded,
    worded,
)

HOSTED = "https://api.honcho.dev"
ASSISTANT = "assistant"  # the assistant's peer id, after the prefix
PAGE = 100


class HonchoProvider(ServiceProvider):
    name = "honcho"
    extra = "honcho"  # its SDK (pyproject.toml)
    label = "Honcho"
    needs = ("a server", "a cloud key")
    required = ("api_key",)
    key_env = "HONCHO_API_KEY"
    default_url = HOSTED
    special_tool = tool(
        "honcho_ask",
        "Ask Honcho what it has come to understand about this user (their preferences, "
        "habits, goals): a question answered from its model of them, not a search.",
        {"query": {"type": "string", "description": "The question about the user."}},
    )

    def extra_fields(self) -> list[ConfigField]:
        return [ConfigField("workspace", "Honcho workspace id", default="hermes", kind="name")]

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        super().__init__(settings)
        self._peers: dict[str, Any] = {}

    def needed(self) -> tuple[str, ...]:
        return self.required if self.base_url == HOSTED else ()  # self-hosted: no key

    @property
    def client(self) -> Any:
        return self.connected(self._make)

    def _make(self, http: httpx.Client) -> Any:
        from honcho import Honcho  # noqa: PLC0415 - imported only when it is used

        return Honcho(
            api_key=self.settings.get("api_key") or None,
            base_url=self.base_url,
            workspace_id=str(self.settings.get("workspace") or "hermes"),
            timeout=self.timeout,
            max_retries=0,  # the outbox tries again, later
            http_client=http,
        )

    def _peer(self, space: str) -> Any:
        """The peer `space` (Honcho makes sure of it, get-or-create, the first time this
        instance asks; the handle is kept, so later calls cost no extra round trip)."""
        client = self.client
        with self._lock:
            peer = self._peers.get(space)
        if peer is None:
            peer = client.peer(space)
            with self._lock:
                self._peers[space] = peer
        return peer

    def close(self) -> None:
        with self._lock:
            self._peers = {}
        super().close()

    def _assistant(self) -> str:
        return self.space(ASSISTANT)

    def ping(self) -> None:
        self.client.get_metadata()

    def search(self, space: str, query: str, limit: int) -> list[str]:
        peer = self._peer(space)
        found = [c.content for c in peer.conclusions.query(query, top_k=limit)]
        if len(found) < limit:
            said = peer.search(query, limit=limit)
            found += [m.content for m in said if m.content not in found]
        return found[:limit]

    def ingest(self, space: str, session_id: str, key: str, messages: list[dict[str, str]]) -> None:
        honcho = self.client
        person, assistant = self._peer(space), self._peer(self._assistant())
        session = honcho.session(self.space(session_id), peers=[person, assistant])
        session.add_messages(
            [
                (person if m["role"] == "user" else assistant).message(
                    m["content"], metadata={"hermes_turn": key}
                )
                for m in messages
                if m["content"]
            ]
        )

    def put_note(self, space: str, note: Note) -> None:
        self._peer(space).conclusions.create([{"content": worded(note)}])

    def notes(self, space: str) -> list[Note]:
        found = []
        for conclusion in self._conclusions(space):
            target, text = unworded(conclusion.content)
            if target is not None:
                found.append(Note(note_key(target, text), target, text, conclusion.id))
        return found

    def delete_note(self, space: str, note: Note) -> None:
        from honcho.http.exceptions import NotFoundError  # noqa: PLC0415

        with contextlib.suppress(NotFoundError):  # gone already (a replay)
            self._peer(space).conclusions.delete(note.ref)

    def remember(self, space: str, text: str) -> None:
        self._peer(space).conclusions.create([{"content": text}])

    def export(self, space: str) -> list[Kept]:
        kept = []
        for conclusion in self._conclusions(space):
            target, text = unworded(conclusion.content)
            kept.append(Kept(text, target))
        return kept

    def drop(self, space: str) -> None:
        peer = self._peer(space)
        for session in list(peer.sessions()):
            session.delete()
        for conclusion in self._conclusions(space):
            peer.conclusions.delete(conclusion.id)

    def _merge(self, keep: str, gone: str) -> None:
        """Conclusions as the base class moves them; what the person who is gone said
        (and what was said to them) into one session of the person who stays."""
        honcho, source, to = self.client, self.space(gone), self.space(keep)
        person, assistant = self._peer(to), self._peer(self._assistant())
        moved = []
        for session in list(self._peer(source).sessions()):
            for message in session.messages():
                who = person if message.peer_id == source else assistant
                moved.append(who.message(message.content, metadata={"hermes_linked": source}))
        if moved:
            session = honcho.session(self.space(f"linked-{gone}"), peers=[person, assistant])
            session.add_messages(moved)  # a replay of the link: the session is new each time
        super()._merge(keep, gone)

    def special(self, space: str, args: dict[str, Any]) -> dict[str, Any]:
        query = str(args["query"]).strip()
        if not query:
            raise ValueError("query is empty")
        answer = self._peer(space).chat(query)
        return {"success": True, "answer": answer or "Honcho knows nothing about that yet."}

    def _conclusions(self, space: str) -> list[Any]:
        return list(self._peer(space).conclusions.list(size=PAGE))


__all__ = ["HonchoProvider"]
