"""What every memory *service* provider shares (Mem0, Hindsight, Honcho, Supermemory,
OpenViking, RetainDB): the interface mapped once onto a handful of calls each service
answers in its own words.

Per person by construction: every call names the person's own namespace on the service
(`space`: a Mem0 user, a Hindsight bank, a Honcho peer, a Supermemory container tag...),
made from our stable user id and the configured prefix, never from a platform id or a
name. A link re-points it: what the service keeps for the person who is gone is copied
into the namespace of the one who stays, then dropped.

The calls a provider implements (blocking, run off the event loop; a failure
raises, so the host keeps the write in its outbox and tries again):
- `search(space, query, limit)`: recall, for prefetch and the `<name>_search` tool;
- `ingest(space, session_id, key, messages)`: a finished turn (the service extracts
  what it keeps from it); `key` is the same on a replay, for services that can be told;
- `put_note(space, note)` / `notes(space)` / `delete_note(space, note)`: the built-in
  stores' entries, mirrored verbatim as notes tagged with their store and a key (a hash
  of store and text), so a replace or remove finds the old one and a replay never adds
  one twice;
- `remember(space, text)`: the `<name>_remember` tool;
- `export(space)` / `drop(space)`: everything kept for a person (a link), and its end;
- `end_session(space, session_id, messages)`: where the service has a session close;
- `special(space, args)`: the one tool it is known for (Honcho's dialectic, Hindsight's
  reflect), when it has one;
- `ping()`: reachability, for `hermes doctor`.

Writes arrive through the host's outbox (hermes/providers/host.py): in order per person,
at least once, kept across outages and restarts; a link is an outbox write too.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import httpx

from hermes import extras
from hermes.memory.entries import parse
from hermes.providers.base import BaseProvider, ConfigField, scrub, secret_values

T = TypeVar("T")
RECALL_LIMIT = 6  # memories injected per turn
TOOL_LIMIT = 10  # results of a search tool
MAX_QUERY_CHARS = 2_000  # a question is cut to this before it is sent
MAX_NOTE_CHARS = 4_000
# a REST service's answer is read up to this many bytes (one of 1,000,000 results cost
# 364 MB parsed whole); recall and exports need far less
MAX_ANSWER_BYTES = 8_000_000
WHOLE_STORE = frozenset({"undo", "import", "merge", "consolidate"})  # content = the store


@dataclass(frozen=True, slots=True)
class Note:
    """One built-in store entry as the service keeps it."""

    key: str  # note_key(target, text)
    target: str  # memory | user
    text: str
    ref: str = ""  # the service's id for it (to delete it)


@dataclass(frozen=True, slots=True)
class Kept:
    """One thing the service keeps for a person (`export`): a note or a memory."""

    text: str
    target: str | None = None  # a note's store; None for what the service learned


def note_key(target: str, text: str) -> str:
    digest = hashlib.sha256(f"{target}\0{text}".encode()).hexdigest()[:24]
    return f"hermes-{target}-{digest}"


# how a note reads on a service that keeps text alone (no metadata to tag it with)
WORDED = {"user": "From the user's profile: ", "memory": "From the assistant's notes: "}


def worded(note: Note) -> str:
    """A note as text that says which store it came from."""
    return WORDED[note.target] + note.text


def unworded(text: str) -> tuple[str | None, str]:
    """(store, entry) of a worded note; (None, text) for anything else."""
    for target, prefix in WORDED.items():
        if text.startswith(prefix):
            return target, text[len(prefix) :]
    return None, text


def turn_key(session_id: str, messages: list[dict[str, Any]]) -> str:
    data = json.dumps([session_id, messages], ensure_ascii=False, sort_keys=True, default=str)
    return f"hermes-turn-{hashlib.sha256(data.encode()).hexdigest()[:24]}"


class ServiceError(Exception):
    """A service answered with an error status (REST providers; the SDKs raise their own),
    with the wait it asked for (Retry-After), if any."""

    def __init__(self, status: int, message: str, retry_after: str | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.retry_after = retry_after


class LinkNotCopiedError(Exception):
    """A link's copy is not all in the namespace that stays: the one that goes is kept."""


class ServiceProvider(BaseProvider):
    """The provider interface over a service's calls (a subclass implements them)."""

    remote = True  # the host sends a link through the outbox (the service may be down)
    label = "service"
    # the setting that must be there before anything is called ("api_key", "base_url")
    required: ClassVar[tuple[str, ...]] = ("api_key",)
    key_env = ""  # the environment variable the key is read from by default
    default_url = ""
    extra = ""  # the pyproject extra that installs its client library ('': none needed)
    special_tool: ClassVar[dict[str, Any] | None] = None  # its own tool, if it has one
    _client: Any = None  # made when first needed (`connected`)
    _http: httpx.Client | None = None

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        super().__init__(settings)
        self._lock = threading.Lock()
        self._open_session = ""  # the session of the writes delivered last

    # -- settings ------------------------------------------------------------------------

    def get_config_schema(self) -> list[ConfigField]:
        fields = [
            ConfigField(
                "base_url",
                f"{self.label} server URL"
                + (f" (default {self.default_url})" if self.default_url else ""),
                required="base_url" in self.needed(),
                default=self.default_url or None,
                kind="url",
            ),
            ConfigField(
                "api_key",
                f"{self.label} API key",
                secret=True,
                required="api_key" in self.needed(),
                env_var=self.key_env or None,
            ),
            ConfigField(
                "namespace_prefix",
                "Prefix of each person's namespace on the service (one per Hermes install)",
                default="hermes-",
                kind="name",
            ),
            ConfigField("timeout_s", "Seconds a call may take", default="10", kind="number"),
        ]
        return fields + self.extra_fields()

    def extra_fields(self) -> list[ConfigField]:
        return []

    def needed(self) -> tuple[str, ...]:
        """The settings these settings still need (`required`, unless a subclass knows
        better: a self-hosted server may take no key)."""
        return self.required

    def is_available(self) -> bool:
        return not self.unavailable_reason()

    def unavailable_reason(self) -> str:
        if missing_library := self._dependency():  # first: no setting can make up for it
            return missing_library
        for field in self.get_config_schema():  # config.yaml may have been edited by hand
            if not field.secret and (problem := field.problem(self.settings.get(field.key))):
                return problem
        missing = [name for name in self.needed() if not self.settings.get(name)]
        if "api_key" in missing:
            where = self.key_env or f"memory.providers.{self.name}.api_key_env"
            return f"no API key ({where}; hermes memory setup {self.name})"
        if missing:
            return f"{', '.join(missing)} not set (hermes memory setup {self.name})"
        return ""

    def connected(self, make: Callable[[httpx.Client], T]) -> T:
        """The instance's client, made once by `make` around an httpx client of the
        instance's own (`http_options`; closed by `close`). A failure to make it leaves
        none: the next call tries again."""
        with self._lock:
            if self._client is None:
                http = httpx.Client(**self.http_options())
                try:
                    self._client = make(http)
                except BaseException:
                    http.close()
                    raise
                self._http = http
            made: T = self._client
            return made

    def warm(self) -> None:
        """The client made (its SDK imported) and the service asked once."""
        self.ping()

    def http_options(self) -> dict[str, Any]:
        return {"timeout": self.timeout}

    def close(self) -> None:
        """Close the client's connections (the next call makes a new one)."""
        with self._lock:
            http, self._client, self._http = self._http, None, None
        if http is not None:
            http.close()

    def rest(self, method: str, path: str, **options: Any) -> Any:
        """One request of a REST provider (its client is the httpx client itself): the
        JSON body (or the text), or a ServiceError with the service's message."""
        http = self.connected(lambda client: client)
        with http.stream(method, path, **options) as answer:
            raw = bytearray()
            for piece in answer.iter_bytes():
                raw += piece
                if len(raw) > MAX_ANSWER_BYTES:  # read no further: a bound, not a parse
                    raise ServiceError(
                        answer.status_code,
                        f"an answer over {MAX_ANSWER_BYTES // 1_000_000} MB: not read",
                    )
        text = raw.decode(answer.encoding or "utf-8", errors="replace")
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = text
        if answer.status_code >= 400:
            detail = body
            if isinstance(body, dict):
                error = body.get("error")
                detail = body.get("message") or (
                    error.get("message") if isinstance(error, dict) else error
                )
            raise ServiceError(
                answer.status_code,
                str(detail or answer.reason_phrase)[:300],
                answer.headers.get("Retry-After"),
            )
        return body

    async def shutdown(self) -> None:
        await asyncio.to_thread(self.close)

    def _dependency(self) -> str:
        """What is missing to import the client library ('' when nothing is)."""
        if not self.extra:
            return ""
        return extras.needs(self.extra, f"The {self.label} provider") or ""

    @property
    def base_url(self) -> str:
        return str(self.settings.get("base_url") or self.default_url).rstrip("/")

    @property
    def timeout(self) -> float:
        try:
            return max(0.1, float(self.settings.get("timeout_s") or 10))
        except ValueError:
            return 10.0

    def space(self, user_id: str | None = None) -> str:
        return f"{self.settings.get('namespace_prefix') or 'hermes-'}{user_id or self.user_id}"

    # -- the service's calls (a subclass implements them; blocking; raise on failure) ---

    def ping(self) -> None:
        raise NotImplementedError

    def search(self, space: str, query: str, limit: int) -> list[str]:
        raise NotImplementedError

    def ingest(self, space: str, session_id: str, key: str, messages: list[dict[str, str]]) -> None:
        raise NotImplementedError

    def put_note(self, space: str, note: Note) -> None:
        raise NotImplementedError

    def notes(self, space: str) -> list[Note]:
        raise NotImplementedError

    def delete_note(self, space: str, note: Note) -> None:
        raise NotImplementedError

    def remember(self, space: str, text: str) -> None:
        raise NotImplementedError

    def export(self, space: str) -> list[Kept]:
        raise NotImplementedError

    def drop(self, space: str) -> None:
        raise NotImplementedError

    async def _run(self, call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.to_thread(call, *args)

    # -- the interface -------------------------------------------------------------------

    async def prefetch(self, query: str, *, session_id: str) -> str:
        found = await self._run(self.search, self.space(), query[:MAX_QUERY_CHARS], RECALL_LIMIT)
        lines = [f"- {' '.join(text.split())}" for text in found if text.strip()]
        if not lines:
            return ""
        return f"From {self.label} (what it keeps about this person):\n" + "\n".join(lines)

    async def sync_turn(
        self,
        user_text: str,
        assistant_text: str,
        *,
        session_id: str,
        messages: list[dict[str, Any]],
    ) -> None:
        turn = [
            {"role": "user", "content": user_text},
            {"role": "assistant", "content": assistant_text},
        ]
        key = turn_key(session_id, turn)
        await self._run(self.ingest, self.space(), session_id, key, turn)
        self._open_session = session_id

    async def on_session_switch(
        self, new_session_id: str, *, parent_session_id: str | None, reason: str
    ) -> None:
        await super().on_session_switch(
            new_session_id, parent_session_id=parent_session_id, reason=reason
        )
        self._open_session = new_session_id

    def on_memory_write(
        self, action: str, target: str, content: str, *, metadata: dict[str, Any]
    ) -> None:
        space = self.space()  # the instance's person: a moved write of one linked away too
        before = metadata.get("before")
        if action in WHOLE_STORE:
            self._reconcile(space, target, parse(content))
            return
        if before and action in ("replace", "remove"):
            for note in self.notes(space):
                if note.key == note_key(target, before):
                    self.delete_note(space, note)
        if content and action in ("add", "replace"):
            self._put(space, target, content)

    def _put(self, space: str, target: str, text: str) -> None:
        note = Note(note_key(target, text), target, text[:MAX_NOTE_CHARS])
        if all(n.key != note.key for n in self.notes(space)):
            self.put_note(space, note)

    def _reconcile(self, space: str, target: str, entries: list[str]) -> None:
        """The service's notes of `target` become exactly `entries`."""
        wanted = {note_key(target, text): text for text in entries}
        kept = [n for n in self.notes(space) if n.target == target]
        for note in kept:
            if note.key not in wanted:
                self.delete_note(space, note)
        have = {n.key for n in kept}
        for key, text in wanted.items():
            if key not in have:
                self.put_note(space, Note(key, target, text[:MAX_NOTE_CHARS]))

    async def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        """The session that ends is the one the delivered writes were about (a new one
        may have been initialized since: writes arrive later, in order)."""
        ending = self._open_session or self.session_id
        await self._run(self.end_session, self.space(), ending, messages)

    def end_session(self, space: str, session_id: str, messages: list[dict[str, Any]]) -> None:
        """A session ended (services with a session close override it)."""
        return None

    # -- tools ---------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        tools = [
            tool(
                f"{self.name}_search",
                f"Search what {self.label} keeps about this user (past conversations and "
                "facts beyond your memory).",
                {"query": {"type": "string", "description": "What to look for."}},
            ),
            tool(
                f"{self.name}_remember",
                f"Store one durable fact about this user in {self.label}.",
                {"content": {"type": "string", "description": "The fact, self-contained."}},
            ),
        ]
        return tools + ([self.special_tool] if self.special_tool else [])

    async def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        try:
            result = await self._tool(name, args)
        except (TypeError, ValueError, KeyError) as exc:
            result = {"success": False, "error": str(exc)}
        return json.dumps(result, ensure_ascii=False)

    async def _tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        space = self.space()
        if name == f"{self.name}_search":
            query = str(args["query"])[:MAX_QUERY_CHARS]
            found = await self._run(self.search, space, query, TOOL_LIMIT)
            return {"success": True, "results": found}
        if name == f"{self.name}_remember":
            content = str(args["content"]).strip()[:MAX_NOTE_CHARS]
            if not content:
                raise ValueError("content is empty")
            await self._run(self.remember, space, content)
            return {"success": True, "stored": content}
        if self.special_tool and name == self.special_tool["function"]["name"]:
            special: dict[str, Any] = await self._run(self.special, space, args)
            return special
        return {"success": False, "error": f"unknown tool {name}"}

    def special(self, space: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"success": False, "error": "no such tool"}

    # -- a link --------------------------------------------------------------------------

    def merge_people(self, keep: str, gone: str, hermes_home: Path) -> None:
        """Everything the service keeps for `gone` is copied to `keep`'s namespace (notes
        stay notes of their store, once), then `gone`'s is dropped. Repeating it after a
        failure halfway is harmless (notes are keyed; `gone` empties last)."""
        if not self.is_available():
            return  # a shipped service that is not configured keeps nothing
        try:
            self._merge(keep, gone)
        finally:
            self.close()

    def _merge(self, keep: str, gone: str) -> None:
        to, source = self.space(keep), self.space(gone)
        have = {n.key for n in self.notes(to)}
        moving = self.export(source)
        for item in moving:
            if item.target is None:
                self.remember(to, item.text)
                continue
            key = note_key(item.target, item.text)
            if key not in have:
                self.put_note(to, Note(key, item.target, item.text))
                have.add(key)
        self._verify_copied(moving, to)
        self.drop(source)

    def _verify_copied(self, moving: list[Kept], to: str) -> None:
        """Before the old namespace goes: every note that moved is among the new one's
        notes (by key). LinkNotCopiedError (the outbox tries the link again) otherwise: a
        copy that did not arrive never empties both."""
        wanted = {note_key(i.target, i.text) for i in moving if i.target is not None}
        missing = wanted - {n.key for n in self.notes(to)}
        if missing:
            raise LinkNotCopiedError(
                f"{self.label}: {len(missing)} of {len(wanted)} notes copied for a link are "
                "not there yet; the old namespace is kept and the link tried again"
            )

    def probe(self) -> str:
        """'' when the service answers, else why not (hermes doctor; blocking)."""
        try:
            self.ping()
        except Exception as exc:
            return scrub(f"{type(exc).__name__}: {exc}", secret_values(self))[:300]
        finally:
            self.close()
        return ""


def tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function-tool schema whose every property is required."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
                "additionalProperties": False,
            },
        },
    }


def transcript(messages: list[dict[str, Any]]) -> str:
    """A turn as text ("User: ... / Assistant: ...") for services that take text."""
    return "\n".join(
        f"{str(m.get('role', 'user')).capitalize()}: {m.get('content', '')}" for m in messages
    )


__all__ = [
    "RECALL_LIMIT",
    "Kept",
    "Note",
    "ServiceError",
    "ServiceProvider",
    "note_key",
    "tool",
    "transcript",
    "turn_key",
    "unworded",
    "worded",
]
