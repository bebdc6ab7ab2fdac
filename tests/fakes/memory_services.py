"""Local fakes of the memory services the providers talk to, each speaking the routes,
payloads, auth headers, pagination and errors its official SDK sends and expects (read
from the SDKs' source), on 127.0.0.1.

One core keeps every service's memories: namespaces (a Mem0 user, a Hindsight bank, a
Honcho peer...) of items with an id, text and metadata; a search ranks a namespace's
items by the words they share with the query (enough to tell right from wrong; the
services' own ranking is theirs). Faults, for every fake:
- `fail(n, status)`: the next n requests answer `status` (429 with Retry-After 0, 5xx);
- `down = True`: every request's connection is dropped (the service is unreachable);
- `delay`: seconds each request waits before it is answered;
- `requests`: every request seen (method, path, query, headers, JSON body).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.http_base import JsonHandler, ThreadedHttp

_WORD = re.compile(r"\w{2,}", re.UNICODE)
_STOP = frozenset("the a an is are was were what who my me i you of to in on and or do did".split())


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.casefold()) if w not in _STOP}


@dataclass
class Item:
    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


class HttpError(Exception):
    """Raised by a route to answer with an error status."""

    def __init__(self, status: int, payload: Any) -> None:
        super().__init__(status)
        self.status, self.payload = status, payload


Route = Callable[[re.Match[str], Request], Any]


class FakeService:
    """The core, the faults and the HTTP plumbing; a subclass adds its routes."""

    auth_header = "Authorization"
    auth_prefix = "Bearer "

    def __init__(self, api_key: str = "test-key") -> None:
        self.api_key = api_key
        self.spaces: dict[str, list[Item]] = {}
        self.requests: list[Request] = []
        self.down = False
        self.echo_key = False  # a refusal that repeats the key it was sent (services do)
        self.retry_after = "0"  # what an injected 429 says to wait
        self.delay = 0.0
        self._failures: list[int] = []
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._routes: list[tuple[str, re.Pattern[str], Route]] = []
        self.routes()
        self._http = ThreadedHttp(self._handler())

    # -- the core --------------------------------------------------------------------------

    def routes(self) -> None:
        raise NotImplementedError

    def route(self, method: str, pattern: str, handler: Route) -> None:
        self._routes.append((method, re.compile(f"^{pattern}$"), handler))

    def add(self, space: str, text: str, metadata: dict[str, Any] | None = None) -> Item:
        with self._lock:
            item = Item(f"{next(self._ids):08d}-{uuid.uuid4().hex[:8]}", text, dict(metadata or {}))
            self.spaces.setdefault(space, []).append(item)
            return item

    def items(self, space: str) -> list[Item]:
        with self._lock:
            return list(self.spaces.get(space, []))

    def remove(self, space: str, item_id: str) -> bool:
        with self._lock:
            kept = [i for i in self.spaces.get(space, []) if i.id != item_id]
            gone = len(kept) != len(self.spaces.get(space, []))
            self.spaces[space] = kept
            return gone

    def find(self, item_id: str) -> tuple[str, Item] | None:
        with self._lock:
            for space, items in self.spaces.items():
                for item in items:
                    if item.id == item_id:
                        return space, item
            return None

    def search(self, space: str, query: str, limit: int) -> list[tuple[Item, float]]:
        asked = words(query)
        scored = []
        for item in self.items(space):
            shared = len(asked & words(item.text))
            if shared:
                scored.append((item, shared / max(1, len(asked))))
        scored.sort(key=lambda pair: -pair[1])
        return scored[:limit]

    def texts(self, space: str) -> list[str]:
        return [item.text for item in self.items(space)]

    # -- faults ----------------------------------------------------------------------------

    def fail(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def _failure(self) -> int | None:
        with self._lock:
            return self._failures.pop(0) if self._failures else None

    def seen(self, method: str, path_pattern: str) -> list[Request]:
        pattern = re.compile(path_pattern)
        return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    # -- HTTP ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return self._http.root

    def start(self) -> FakeService:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get(self.auth_header.lower(), "") == f"{self.auth_prefix}{self.api_key}"

    def _handler(self) -> type[JsonHandler]:
        fake = self

        class Handler(JsonHandler):
            def _serve(self, method: str) -> None:
                if fake.delay:
                    time.sleep(fake.delay)
                if fake.down:
                    self.drop()
                    return
                url = urlsplit(self.path)
                raw = self.body()
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = Request(method, url.path, parse_qs(url.query), headers, body)
                with fake._lock:
                    fake.requests.append(request)
                status = fake._failure()
                if status is not None:
                    extra = {"Retry-After": fake.retry_after} if status == 429 else {}
                    self.send_json(status, {"detail": f"injected {status}"}, extra)
                    return
                if not fake.authorized(headers):
                    given = headers.get(fake.auth_header.lower(), "")
                    said = f"Invalid API key: {given}" if fake.echo_key else "Invalid API key"
                    self.send_json(401, {"detail": said, "message": said})
                    return
                for verb, pattern, handler in fake._routes:
                    match = pattern.match(url.path)
                    if verb == method and match:
                        try:
                            self.send_json(200, handler(match, request))
                        except HttpError as refused:
                            self.send_json(refused.status, refused.payload)
                        return
                self.send_json(404, {"detail": f"no route {method} {url.path}"})

            def do_GET(self) -> None:  # noqa: N802
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

            def do_PUT(self) -> None:  # noqa: N802
                self._serve("PUT")

            def do_PATCH(self) -> None:  # noqa: N802
                self._serve("PATCH")

            def do_DELETE(self) -> None:  # noqa: N802
                self._serve("DELETE")

        return Handler


def _first(request: Request, name: str, default: str = "") -> str:
    return request.query.get(name, [default])[0]


# -- Mem0 (mem0ai 2.2.1, MemoryClient) --------------------------------------------------------


class FakeMem0(FakeService):
    """The Mem0 platform API: `Authorization: Token KEY`; GET /v1/ping/ (made with every
    client); POST /v3/memories/add/ (messages, user_id, infer, metadata; with inference a
    fact per user message), /v3/memories/search/ and /v3/memories/ (filters.user_id;
    page/page_size in the query string; paginated `next`), PUT/DELETE /v1/memories/{id}/,
    DELETE /v1/memories/?user_id= (delete_all)."""

    auth_prefix = "Token "

    def routes(self) -> None:
        self.route("GET", "/v1/ping/", self._ping)
        self.route("POST", "/v3/memories/add/", self._add)
        self.route("POST", "/v3/memories/search/", self._search)
        self.route("POST", "/v3/memories/", self._list)
        self.route("DELETE", "/v1/memories/", self._delete_all)
        self.route("GET", r"/v1/memories/(?P<id>[^/]+)/", self._get)
        self.route("PUT", r"/v1/memories/(?P<id>[^/]+)/", self._update)
        self.route("DELETE", r"/v1/memories/(?P<id>[^/]+)/", self._delete)

    @staticmethod
    def _ping(match: re.Match[str], request: Request) -> Any:
        return {"status": "ok", "org_id": "org_fake", "project_id": "proj_fake", "user_email": None}

    @staticmethod
    def _user(body: dict[str, Any]) -> str:
        user = (body.get("filters") or {}).get("user_id") or body.get("user_id")
        if not user:
            raise HttpError(400, {"detail": "user_id is required (filters.user_id)"})
        return str(user)

    def _shown(self, item: Item, user: str, score: float | None = None) -> dict[str, Any]:
        shown = {
            "id": item.id,
            "memory": item.text,
            "user_id": user,
            "metadata": item.metadata or None,
            "categories": [],
            "created_at": item.created,
            "updated_at": item.created,
        }
        if score is not None:
            shown["score"] = score
        return shown

    def _add(self, match: re.Match[str], request: Request) -> Any:
        body = request.body
        user = str(body.get("user_id") or "")
        if not user:
            raise HttpError(400, {"detail": "one of user_id, agent_id, run_id is required"})
        infer = body.get("infer", True)
        added = []
        for message in body["messages"]:
            if infer and message["role"] != "user":
                continue  # the fake "extracts" what the user said
            text = message["content"] if not infer else f"User said: {message['content']}"
            item = self.add(user, text, body.get("metadata"))
            added.append({"id": item.id, "memory": item.text, "event": "ADD"})
        return {"results": added}

    def _search(self, match: re.Match[str], request: Request) -> Any:
        user = self._user(request.body)
        limit = int(request.body.get("top_k") or 10)
        found = self.search(user, request.body["query"], limit)
        return {"results": [self._shown(item, user, score) for item, score in found]}

    def _list(self, match: re.Match[str], request: Request) -> Any:
        user = self._user(request.body)
        page, size = int(_first(request, "page", "1")), int(_first(request, "page_size", "100"))
        items = self.items(user)
        chunk = items[(page - 1) * size : page * size]
        more = page * size < len(items)
        return {
            "count": len(items),
            "next": f"{self.base_url}/v3/memories/?page={page + 1}&page_size={size}"
            if more
            else None,
            "previous": None,
            "results": [self._shown(item, user) for item in chunk],
        }

    def _get(self, match: re.Match[str], request: Request) -> Any:
        found = self.find(match["id"])
        if found is None:
            raise HttpError(404, {"detail": "Memory not found"})
        return self._shown(found[1], found[0])

    def _update(self, match: re.Match[str], request: Request) -> Any:
        found = self.find(match["id"])
        if found is None:
            raise HttpError(404, {"detail": "Memory not found"})
        found[1].text = request.body.get("text", found[1].text)
        return self._shown(found[1], found[0])

    def _delete(self, match: re.Match[str], request: Request) -> Any:
        found = self.find(match["id"])
        if found is None or not self.remove(found[0], match["id"]):
            raise HttpError(404, {"detail": "Memory not found"})
        return {"message": "Memory deleted successfully!"}

    def _delete_all(self, match: re.Match[str], request: Request) -> Any:
        user = _first(request, "user_id")
        if not user:
            raise HttpError(400, {"detail": "a filter is required"})
        with self._lock:
            self.spaces.pop(user, None)
        return {"message": "Memories deleted successfully!"}


# -- Hindsight (hindsight-client 1.1.0) ----------------------------------------------------

_FEATURES = (
    "observations mcp worker bank_config_api bank_llm_health file_upload_api "
    "document_export_api document_import_api audit_log llm_trace store_document_text"
).split()


class FakeHindsight(FakeService):
    """A Hindsight server: `Authorization: Bearer KEY`; GET /version; per bank
    (/v1/default/banks/{bank}): POST /memories (retain: items with content, context,
    metadata, document_id, update_mode; a document retained again is replaced), POST
    /memories/recall, POST /reflect, GET /memories/list (limit/offset), DELETE
    /documents/{id}, DELETE the bank. The fake "extracts" one memory unit per item,
    its text as given; a bank is made by its first retain, and one never made is 404
    to delete."""

    BANK = "/v1/default/banks/(?P<bank>[^/]+)"

    def routes(self) -> None:
        self.route("GET", "/version", self._version)
        self.route("POST", f"{self.BANK}/memories", self._retain)
        self.route("POST", f"{self.BANK}/memories/recall", self._recall)
        self.route("POST", f"{self.BANK}/reflect", self._reflect)
        self.route("GET", f"{self.BANK}/memories/list", self._list)
        self.route("DELETE", f"{self.BANK}/documents/(?P<doc>[^/]+)", self._delete_document)
        self.route("DELETE", self.BANK, self._delete_bank)

    @staticmethod
    def _version(match: re.Match[str], request: Request) -> Any:
        return {"api_version": "0.5.0", "features": dict.fromkeys(_FEATURES, False)}

    def _retain(self, match: re.Match[str], request: Request) -> Any:
        bank, body = match["bank"], request.body
        for entry in body["items"]:
            document = entry.get("document_id") or body.get("document_id")
            if document and entry.get("update_mode", "replace") == "replace":
                with self._lock:
                    self.spaces[bank] = [
                        i for i in self.spaces.get(bank, []) if i.metadata.get("_doc") != document
                    ]
            meta = {**(entry.get("metadata") or {}), "_doc": document, "_ctx": entry.get("context")}
            self.add(bank, entry["content"], meta)
        with self._lock:
            self.spaces.setdefault(bank, [])
        return {"success": True, "bank_id": bank, "items_count": len(body["items"]), "async": False}

    def _unit(self, item: Item) -> dict[str, Any]:
        meta = {k: v for k, v in item.metadata.items() if not k.startswith("_")}
        return {
            "id": item.id,
            "text": item.text,
            "context": item.metadata.get("_ctx") or "",
            "document_id": item.metadata.get("_doc"),
            "metadata": meta or None,
        }

    def _recall(self, match: re.Match[str], request: Request) -> Any:
        found = self.search(match["bank"], request.body["query"], 10)
        return {"results": [{**self._unit(item), "type": "world"} for item, _ in found]}

    def _reflect(self, match: re.Match[str], request: Request) -> Any:
        found = self.search(match["bank"], request.body["query"], 5)
        facts = "; ".join(item.text for item, _ in found) or "nothing I remember"
        return {"text": f"From what I remember: {facts}."}

    def _list(self, match: re.Match[str], request: Request) -> Any:
        limit, offset = int(_first(request, "limit", "100")), int(_first(request, "offset", "0"))
        items = self.items(match["bank"])
        page = items[offset : offset + limit]
        units = [{**self._unit(item), "date": "", "entities": ""} for item in page]
        return {"items": units, "total": len(items), "limit": limit, "offset": offset}

    def _delete_document(self, match: re.Match[str], request: Request) -> Any:
        bank, doc = match["bank"], match["doc"]
        with self._lock:
            before = self.spaces.get(bank, [])
            kept = [i for i in before if i.metadata.get("_doc") != doc]
            self.spaces[bank] = kept
        if len(kept) == len(before):
            raise HttpError(404, {"detail": f"Document {doc} not found"})
        gone = len(before) - len(kept)
        return {
            "success": True,
            "message": "deleted",
            "document_id": doc,
            "memory_units_deleted": gone,
        }

    def _delete_bank(self, match: re.Match[str], request: Request) -> Any:
        with self._lock:
            if self.spaces.pop(match["bank"], None) is None:
                raise HttpError(404, {"detail": "Bank not found"})
        return {"success": True, "message": "Bank deleted"}


# -- Honcho (honcho-ai 2.7.0) ------------------------------------------------------------------


class FakeHoncho(FakeService):
    """A Honcho server (API v3): `Authorization: Bearer KEY`; get-or-create POSTs for
    workspaces, peers and sessions (a session's peers in its body); messages added to a
    session (a list back) and listed by page (`items`, `page`, `size`, `total`, `pages`);
    a peer's sessions listed, its messages searched, its dialectic (`/chat`: the answer
    in `content`); conclusions created, listed by observer/observed, queried, deleted;
    sessions deleted. A namespace here is a peer: its conclusions about itself and the
    messages it sent."""

    W = "/v3/workspaces/(?P<w>[^/]+)"

    def __init__(self, api_key: str = "test-key") -> None:
        self.sessions: dict[str, set[str]] = {}  # session id -> its peers
        self.peers: set[str] = set()
        super().__init__(api_key)

    def routes(self) -> None:
        self.route("POST", "/v3/workspaces", self._workspace)
        self.route("POST", f"{self.W}/peers", self._peer)
        self.route("POST", f"{self.W}/sessions", self._session)
        self.route("DELETE", f"{self.W}/sessions/(?P<s>[^/]+)", self._delete_session)
        self.route("POST", f"{self.W}/sessions/(?P<s>[^/]+)/messages", self._add_messages)
        self.route("POST", f"{self.W}/sessions/(?P<s>[^/]+)/messages/list", self._messages)
        self.route("POST", f"{self.W}/peers/(?P<p>[^/]+)/sessions", self._peer_sessions)
        self.route("POST", f"{self.W}/peers/(?P<p>[^/]+)/search", self._search_peer)
        self.route("POST", f"{self.W}/peers/(?P<p>[^/]+)/chat", self._chat)
        self.route("POST", f"{self.W}/conclusions", self._conclude)
        self.route("POST", f"{self.W}/conclusions/list", self._conclusions)
        self.route("POST", f"{self.W}/conclusions/query", self._query)
        self.route("DELETE", f"{self.W}/conclusions/(?P<id>[^/]+)", self._delete_conclusion)

    @staticmethod
    def _now() -> str:
        return datetime.now(UTC).isoformat()

    def _workspace(self, match: re.Match[str], request: Request) -> Any:
        return {
            "id": request.body["id"],
            "metadata": {},
            "configuration": {},
            "created_at": self._now(),
        }

    def _peer(self, match: re.Match[str], request: Request) -> Any:
        with self._lock:
            self.peers.add(request.body["id"])
        return {
            "id": request.body["id"],
            "workspace_id": match["w"],
            "created_at": self._now(),
            "metadata": request.body.get("metadata") or {},
            "configuration": {},
        }

    def _shown_session(self, workspace: str, session: str) -> dict[str, Any]:
        return {
            "id": session,
            "is_active": True,
            "workspace_id": workspace,
            "metadata": {},
            "configuration": {},
            "created_at": self._now(),
        }

    def _session(self, match: re.Match[str], request: Request) -> Any:
        with self._lock:
            self.sessions.setdefault(request.body["id"], set()).update(
                request.body.get("peers") or {}
            )
        return self._shown_session(match["w"], request.body["id"])

    def _delete_session(self, match: re.Match[str], request: Request) -> Any:
        with self._lock:
            if self.sessions.pop(match["s"], None) is None:
                raise HttpError(404, {"detail": "Session not found"})
            for space, items in self.spaces.items():
                self.spaces[space] = [i for i in items if i.metadata.get("_session") != match["s"]]
        return {"message": "Session deleted"}

    def _message(self, workspace: str, peer: str, item: Item) -> dict[str, Any]:
        return {
            "id": item.id,
            "content": item.text,
            "peer_id": peer,
            "session_id": item.metadata["_session"],
            "metadata": {k: v for k, v in item.metadata.items() if not k.startswith("_")},
            "created_at": item.created,
            "workspace_id": workspace,
            "token_count": len(item.text.split()),
        }

    def _add_messages(self, match: re.Match[str], request: Request) -> Any:
        if match["s"] not in self.sessions:
            raise HttpError(404, {"detail": "Session not found"})
        added = []
        for message in request.body["messages"]:
            meta = {**(message.get("metadata") or {}), "_kind": "message", "_session": match["s"]}
            item = self.add(message["peer_id"], message["content"], meta)
            added.append(self._message(match["w"], message["peer_id"], item))
        return added

    @staticmethod
    def _page(items: list[Any], request: Request) -> dict[str, Any]:
        page, size = int(_first(request, "page", "1")), int(_first(request, "size", "50"))
        pages = max(1, -(-len(items) // size))
        chunk = items[(page - 1) * size : page * size]
        return {"items": chunk, "total": len(items), "page": page, "size": size, "pages": pages}

    def _messages(self, match: re.Match[str], request: Request) -> Any:
        with self._lock:
            found = [
                (space, item)
                for space, items in self.spaces.items()
                for item in items
                if item.metadata.get("_session") == match["s"]
            ]
        found.sort(key=lambda pair: pair[1].id)
        return self._page([self._message(match["w"], s, i) for s, i in found], request)

    def _peer_sessions(self, match: re.Match[str], request: Request) -> Any:
        with self._lock:
            mine = [s for s, peers in self.sessions.items() if match["p"] in peers]
        return self._page([self._shown_session(match["w"], s) for s in mine], request)

    def _search_peer(self, match: re.Match[str], request: Request) -> Any:
        limit = int(request.body.get("limit") or 10)
        found = self.search(match["p"], request.body["query"], 50)
        said = [item for item, _ in found if item.metadata.get("_kind") == "message"][:limit]
        return [self._message(match["w"], match["p"], item) for item in said]

    def _chat(self, match: re.Match[str], request: Request) -> Any:
        found = self.search(match["p"], request.body["query"], 5)
        if not found:
            return {"content": None}
        return {"content": "They told me: " + "; ".join(item.text for item, _ in found)}

    def _conclusion(self, peer: str, item: Item) -> dict[str, Any]:
        return {
            "id": item.id,
            "content": item.text,
            "observer_id": peer,
            "observed_id": peer,
            "session_id": None,
            "created_at": item.created,
        }

    def _conclude(self, match: re.Match[str], request: Request) -> Any:
        made = []
        for conclusion in request.body["conclusions"]:
            if conclusion["observer_id"] != conclusion["observed_id"]:
                raise HttpError(422, {"detail": "the fake keeps self-conclusions only"})
            peer = conclusion["observed_id"]
            item = self.add(peer, conclusion["content"], {"_kind": "conclusion"})
            made.append(self._conclusion(peer, item))
        return made

    def _own(self, request: Request) -> str:
        filters = (request.body or {}).get("filters") or {}
        peer = filters.get("observed_id")
        if not peer or filters.get("observer_id") != peer:
            raise HttpError(422, {"detail": "filters observer_id and observed_id are required"})
        return str(peer)

    def _conclusions(self, match: re.Match[str], request: Request) -> Any:
        peer = self._own(request)
        mine = [i for i in self.items(peer) if i.metadata.get("_kind") == "conclusion"]
        return self._page([self._conclusion(peer, i) for i in mine], request)

    def _query(self, match: re.Match[str], request: Request) -> Any:
        peer = self._own(request)
        found = self.search(peer, request.body["query"], 50)
        top = [i for i, _ in found if i.metadata.get("_kind") == "conclusion"]
        return [self._conclusion(peer, i) for i in top[: int(request.body.get("top_k") or 10)]]

    def _delete_conclusion(self, match: re.Match[str], request: Request) -> Any:
        found = self.find(match["id"])
        if found is None or not self.remove(found[0], match["id"]):
            raise HttpError(404, {"detail": "Conclusion not found"})
        return {"message": "Conclusion deleted"}


# -- Supermemory (supermemory 5.0.1) ---------------------------------------------------------


class FakeSupermemory(FakeService):
    """The Supermemory API (v5, namespaced): `Authorization: Bearer KEY`; GET /ns (the
    caller's namespaces); per namespace (/ns/{ns}): POST /document (content, a
    caller-defined `id`, metadata; as the SDK says, a reused id *appends* the new content
    to that document), GET /document/{id} (ours or the service's; 404), POST /search (results with
    `memory`, `similarity`, camelCase system fields), POST /profile (static and dynamic
    facts), POST /list/documents (page/limit in the query; `pagination` with
    currentPage/totalPages), DELETE /document (ids: ours or the service's; errors per
    id), DELETE the namespace (404 if it was never made). The fake learns a document's
    text as one memory."""

    NS = "/ns/(?P<ns>[^/]+)"

    def routes(self) -> None:
        self.route("GET", "/ns", self._namespaces)
        self.route("POST", f"{self.NS}/document", self._add_document)
        self.route("DELETE", f"{self.NS}/document", self._delete_documents)
        self.route("GET", f"{self.NS}/document/(?P<id>[^/]+)", self._get_document)
        self.route("POST", f"{self.NS}/search", self._search)
        self.route("POST", f"{self.NS}/profile", self._profile)
        self.route("POST", f"{self.NS}/list/(?P<type>documents|memories|chunks)", self._list)
        self.route("DELETE", self.NS, self._delete_namespace)

    @staticmethod
    def _system(item: Item) -> dict[str, Any]:
        return {"status": "done", "createdAt": item.created, "updatedAt": item.created}

    def _document_system(self, item: Item) -> dict[str, Any]:
        return {**self._system(item), "dreamingStatus": "done"}

    def _named(self, ns: str, wanted: str) -> Item | None:
        hits = [i for i in self.items(ns) if wanted in (i.id, i.metadata.get("_custom"))]
        return hits[0] if hits else None

    @staticmethod
    def _pagination(page: int, limit: int, total: int) -> dict[str, Any]:
        pages = max(1, -(-total // limit))
        return {"currentPage": page, "limit": limit, "totalItems": total, "totalPages": pages}

    def _namespaces(self, match: re.Match[str], request: Request) -> Any:
        with self._lock:
            names = sorted(self.spaces)
        shown = [{"namespace": name, "documentCount": len(self.spaces[name])} for name in names]
        return {"namespaces": shown, "pagination": self._pagination(1, 100, len(names))}

    def _add_document(self, match: re.Match[str], request: Request) -> Any:
        ns, body = match["ns"], request.body
        custom = body.get("id")
        with self._lock:
            same = self._named(ns, custom) if custom else None
            if same is not None:  # a reused id: the content is appended, its history kept
                same.text = f"{same.text}\n\n{body['content']}"
                same.metadata.update(body.get("metadata") or {})
                return {"id": same.id, "status": "queued"}
            meta = {**(body.get("metadata") or {}), "_custom": custom}
            item = self.add(ns, body["content"], meta)
        return {"id": item.id, "status": "queued"}

    def _get_document(self, match: re.Match[str], request: Request) -> Any:
        item = self._named(match["ns"], match["id"])
        if item is None:
            raise HttpError(404, {"error": "Not found", "details": "no such document"})
        return {
            "id": item.id,
            "type": "text",
            "content": item.text,
            "metadata": self._shown_meta(item),
            "system": self._document_system(item),
        }

    def _delete_documents(self, match: re.Match[str], request: Request) -> Any:
        ns, count, errors = match["ns"], 0, []
        for wanted in request.body["ids"]:
            hits = [i for i in self.items(ns) if wanted in (i.id, i.metadata.get("_custom"))]
            for item in hits:
                self.remove(ns, item.id)
            count += len(hits)
            if not hits:
                errors.append({"id": wanted, "error": "not found"})
        return {"count": count, "errors": errors}

    def _shown_meta(self, item: Item) -> dict[str, Any]:
        return {k: v for k, v in item.metadata.items() if not k.startswith("_")}

    def _search(self, match: re.Match[str], request: Request) -> Any:
        limit = int(request.body.get("limit") or 10)
        found = self.search(match["ns"], request.body["query"], limit)
        results = [
            {
                "id": item.id,
                "memory": item.text,
                "metadata": self._shown_meta(item),
                "similarity": score,
                "isLatest": True,
                "isInference": False,
                "system": self._system(item),
            }
            for item, score in found
        ]
        return {"results": results, "searchTime": 1.0}

    def _profile(self, match: re.Match[str], request: Request) -> Any:
        facts = [{"id": i.id, "memory": i.text} for i in self.items(match["ns"])]
        return {"profile": {"static": facts[:-3], "dynamic": facts[-3:], "buckets": {}}}

    def _list(self, match: re.Match[str], request: Request) -> Any:
        page, limit = int(_first(request, "page", "1")), int(_first(request, "limit", "50"))
        items = self.items(match["ns"])
        chunk = items[(page - 1) * limit : page * limit]
        # as the SDK's DocumentListItem says: content is the extracted text only when the
        # request's include.content is true, else null
        with_content = bool(((request.body or {}).get("include") or {}).get("content"))
        documents = [
            {
                "id": i.id,
                "type": "text",
                "content": i.text if with_content else None,
                "metadata": self._shown_meta(i),
                "system": self._document_system(i),
            }
            for i in chunk
        ]
        shown = documents if match["type"] == "documents" else []
        return {
            "documents": shown,
            "chunks": [],
            "memories": [],
            "pagination": self._pagination(page, limit, len(items)),
        }

    def _delete_namespace(self, match: re.Match[str], request: Request) -> Any:
        with self._lock:
            if self.spaces.pop(match["ns"], None) is None:
                raise HttpError(404, {"error": "Not found", "details": "no such namespace"})
        return {"namespace": match["ns"], "deleted": True}


# -- OpenViking (REST API /api/v1, trusted mode) --------------------------------------------


class FakeOpenViking(FakeService):
    """An OpenViking server in `trusted` auth mode: `X-API-Key: KEY`, and the person in
    `X-OpenViking-User` (400 without it); `viking://~/` is that person's home. Answers in
    its envelope (`{"status": "ok", "result": ...}`, errors as `{"status": "error",
    "error": {"code", "message"}}`). Sessions: create (409 when the id is taken),
    messages/batch, commit (the fake "extracts" a memory file per user message), list,
    delete. Files: content/write (`create`: 409 when it exists), content/read, fs/ls,
    DELETE fs (recursive). search/find over the person's memory files."""

    auth_header = "X-API-Key"
    auth_prefix = ""

    def __init__(self, api_key: str = "test-key") -> None:
        self.sessions: dict[tuple[str, str], list[dict[str, str]]] = {}
        super().__init__(api_key)

    def routes(self) -> None:
        self.route("GET", "/health", lambda m, r: {"status": "ok"})
        self.route("POST", "/api/v1/sessions", self._create_session)
        self.route("GET", "/api/v1/sessions", self._list_sessions)
        self.route("DELETE", "/api/v1/sessions/(?P<s>[^/]+)", self._delete_session)
        self.route("POST", "/api/v1/sessions/(?P<s>[^/]+)/messages/batch", self._add_messages)
        self.route("POST", "/api/v1/sessions/(?P<s>[^/]+)/commit", self._commit)
        self.route("POST", "/api/v1/content/write", self._write)
        self.route("GET", "/api/v1/content/read", self._read)
        self.route("GET", "/api/v1/fs/ls", self._ls)
        self.route("DELETE", "/api/v1/fs", self._rm)
        self.route("POST", "/api/v1/search/find", self._find)

    @staticmethod
    def _user(request: Request) -> str:
        user = request.headers.get("x-openviking-user", "")
        if not user or not request.headers.get("x-openviking-account"):
            raise HttpError(400, _ov_error("INVALID_ARGUMENT", "trusted mode needs the user"))
        return user

    def _uri(self, request: Request, uri: str) -> str:
        user = self._user(request)
        if not uri.startswith("viking://~/"):
            raise HttpError(403, _ov_error("PERMISSION_DENIED", f"{uri} is not the user's"))
        return f"viking://user/{user}/" + uri.removeprefix("viking://~/")

    @staticmethod
    def _ok(result: Any) -> dict[str, Any]:
        return {"status": "ok", "result": result, "time": 0.01}

    def _files(self, user: str, prefix: str) -> list[Item]:
        return [i for i in self.items(user) if str(i.metadata.get("_uri", "")).startswith(prefix)]

    def _create_session(self, match: re.Match[str], request: Request) -> Any:
        user, sid = self._user(request), (request.body or {}).get("session_id") or uuid.uuid4().hex
        with self._lock:
            if (user, sid) in self.sessions:
                raise HttpError(409, _ov_error("ALREADY_EXISTS", f"session {sid} exists"))
            self.sessions[(user, sid)] = []
        return self._ok({"session_id": sid, "user": {"account_id": "default", "user_id": user}})

    def _list_sessions(self, match: re.Match[str], request: Request) -> Any:
        user = self._user(request)
        mine = [s for (u, s) in self.sessions if u == user]
        return self._ok(
            [{"session_id": s, "uri": f"viking://user/{user}/sessions/{s}"} for s in mine]
        )

    def _session(self, request: Request, sid: str) -> tuple[str, list[dict[str, str]]]:
        user = self._user(request)
        messages = self.sessions.get((user, sid))
        if messages is None:
            raise HttpError(404, _ov_error("NOT_FOUND", f"session {sid} not found"))
        return user, messages

    def _delete_session(self, match: re.Match[str], request: Request) -> Any:
        user, _ = self._session(request, match["s"])
        with self._lock:
            del self.sessions[(user, match["s"])]
            self.spaces[user] = [
                i for i in self.items(user) if i.metadata.get("_session") != match["s"]
            ]
        return self._ok({"session_id": match["s"], "deleted": True})

    def _add_messages(self, match: re.Match[str], request: Request) -> Any:
        user, messages = self._session(request, match["s"])
        for message in request.body["messages"]:
            messages.append({"role": message["role"], "content": message["content"]})
            self.add(user, message["content"], {"_session": match["s"], "_kind": "message"})
        return self._ok({"added": len(request.body["messages"]), "message_count": len(messages)})

    def _commit(self, match: re.Match[str], request: Request) -> Any:
        user, messages = self._session(request, match["s"])
        for message in messages:
            if message["role"] == "user":
                uri = f"viking://user/{user}/memories/events/{uuid.uuid4().hex[:12]}.md"
                self.add(user, f"The user said: {message['content']}", {"_uri": uri})
        messages.clear()
        return self._ok({"task_id": uuid.uuid4().hex, "status": "accepted", "archived": True})

    def _write(self, match: re.Match[str], request: Request) -> Any:
        uri = self._uri(request, request.body["uri"])
        user = self._user(request)
        with self._lock:
            exists = [i for i in self.items(user) if i.metadata.get("_uri") == uri]
            if request.body.get("mode") == "create" and exists:
                raise HttpError(409, _ov_error("ALREADY_EXISTS", f"{uri} exists"))
            for item in exists:
                self.remove(user, item.id)
            self.add(user, request.body["content"], {"_uri": uri})
        return self._ok({"root_uri": uri})

    def _read(self, match: re.Match[str], request: Request) -> Any:
        uri = self._uri(request, _first(request, "uri"))
        found = [i for i in self.items(self._user(request)) if i.metadata.get("_uri") == uri]
        if not found:
            raise HttpError(404, _ov_error("NOT_FOUND", f"{uri} not found"))
        return self._ok(found[0].text)

    def _ls(self, match: re.Match[str], request: Request) -> Any:
        folder = self._uri(request, _first(request, "uri")).rstrip("/") + "/"
        files = self._files(self._user(request), folder)
        if not files:
            raise HttpError(404, _ov_error("NOT_FOUND", f"{folder} not found"))
        entries = []
        for item in files:
            rest = str(item.metadata["_uri"])[len(folder) :]
            if "/" in rest and _first(request, "recursive") != "true":
                continue  # in a subfolder
            entries.append(
                {"name": rest, "size": len(item.text), "isDir": False, "uri": item.metadata["_uri"]}
            )
        return self._ok(entries)

    def _rm(self, match: re.Match[str], request: Request) -> Any:
        uri, user = self._uri(request, _first(request, "uri")), self._user(request)
        recursive = _first(request, "recursive") == "true"
        hits = [
            i
            for i in self.items(user)
            if i.metadata.get("_uri") == uri
            or (recursive and str(i.metadata.get("_uri", "")).startswith(uri.rstrip("/") + "/"))
        ]
        if not hits:
            raise HttpError(404, _ov_error("NOT_FOUND", f"{uri} not found"))
        for item in hits:
            self.remove(user, item.id)
        return self._ok({"uri": uri, "removed": len(hits)})

    def _find(self, match: re.Match[str], request: Request) -> Any:
        user = self._user(request)
        target = self._uri(request, request.body.get("target_uri") or "viking://~/")
        limit = int(request.body.get("limit") or 10)
        found = [
            (item, score)
            for item, score in self.search(user, request.body["query"], 100)
            if str(item.metadata.get("_uri", "")).startswith(target)
        ][:limit]
        memories = [
            {
                "uri": item.metadata["_uri"],
                "context_type": "memory",
                "level": 2,
                "abstract": item.text,
                "overview": None,
                "category": "events",
                "score": score,
                "match_reason": "",
            }
            for item, score in found
        ]
        return self._ok(
            {"memories": memories, "resources": [], "skills": [], "total": len(memories)}
        )


def _ov_error(code: str, message: str) -> dict[str, Any]:
    return {"status": "error", "error": {"code": code, "message": message}}


# -- RetainDB (REST /v1) ------------------------------------------------------------------------


class FakeRetainDB(FakeService):
    """RetainDB's API: `Authorization: Bearer KEY`; every body (or the query string)
    names the `project` (400 without it) and the person (`user_id`, or the profile path).
    POST /v1/memory (add), DELETE /v1/memory/{id}, POST /v1/memory/search (`results`
    with content and score), POST /v1/memory/ingest/session (the fake "extracts" a memory
    per user message), GET /v1/memory/profile/{user} (`memories`), POST
    /v1/memory/profile/{user}/ask (`answer`)."""

    def routes(self) -> None:
        self.route("POST", "/v1/memory", self._add_memory)
        self.route("DELETE", "/v1/memory/(?P<id>[^/]+)", self._delete)
        self.route("POST", "/v1/memory/search", self._search)
        self.route("POST", "/v1/memory/ingest/session", self._ingest)
        self.route("GET", "/v1/memory/profile/(?P<user>[^/]+)", self._profile)
        self.route("POST", "/v1/memory/profile/(?P<user>[^/]+)/ask", self._ask)

    @staticmethod
    def _scoped(request: Request) -> str:
        body = request.body if isinstance(request.body, dict) else {}
        if not (body.get("project") or _first(request, "project")):
            raise HttpError(400, {"error": "project is required"})
        user = body.get("user_id")
        if not user:
            raise HttpError(400, {"error": "user_id is required"})
        return str(user)

    def _shown(self, item: Item, score: float | None = None) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "id": item.id,
            "content": item.text,
            "memory_type": item.metadata.get("memory_type", "factual"),
            "created_at": item.created,
        }
        if score is not None:
            shown["score"] = score
        return shown

    def _add_memory(self, match: re.Match[str], request: Request) -> Any:
        user = self._scoped(request)
        meta = {"memory_type": request.body.get("memory_type") or "factual"}
        item = self.add(user, request.body["content"], meta)
        return {"id": item.id, "memory": self._shown(item)}

    def _delete(self, match: re.Match[str], request: Request) -> Any:
        found = self.find(match["id"])
        if found is None or not self.remove(found[0], match["id"]):
            raise HttpError(404, {"error": "memory not found"})
        return {"deleted": True, "id": match["id"]}

    def _search(self, match: re.Match[str], request: Request) -> Any:
        user = self._scoped(request)
        found = self.search(user, request.body["query"], int(request.body.get("top_k") or 8))
        # the published shape (tests/fakes/reference/retaindb_search.json): each result
        # holds the memory under "memory", its score beside it
        results = [{"memory": self._shown(item), "score": score} for item, score in found]
        return {"results": results, "count": len(results), "trace_id": "trc_fake"}

    def _ingest(self, match: re.Match[str], request: Request) -> Any:
        user = self._scoped(request)
        said = [m for m in request.body["messages"] if m["role"] == "user"]
        for message in said:
            self.add(user, f"The user said: {message['content']}", {"memory_type": "event"})
        return {"ingested": len(request.body["messages"]), "memories_created": len(said)}

    def _profile(self, match: re.Match[str], request: Request) -> Any:
        if not _first(request, "project"):
            raise HttpError(400, {"error": "project is required"})
        return {
            "user_id": match["user"],
            "memories": [self._shown(i) for i in self.items(match["user"])],
        }

    def _ask(self, match: re.Match[str], request: Request) -> Any:
        if not request.body.get("project"):
            raise HttpError(400, {"error": "project is required"})
        found = self.search(match["user"], request.body["query"], 5)
        answer = "; ".join(item.text for item, _ in found) if found else None
        return {"answer": answer}


__all__ = [
    "FakeHindsight",
    "FakeHoncho",
    "FakeMem0",
    "FakeOpenViking",
    "FakeRetainDB",
    "FakeService",
    "FakeSupermemory",
    "HttpError",
    "Item",
    "Request",
    "words",
]
