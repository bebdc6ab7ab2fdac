"""The REST-only services' fakes answer in the shapes their published API references
show (the examples stored under tests/fakes/reference/, each with its source), and the
providers read those examples: a fake written from our own reading of a service cannot
pass a provider that misreads it."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from hermes.providers.retaindb import RetainDBProvider
from hermes.providers.service import Note, ServiceProvider
from tests.fakes.http_base import POLL_S
from tests.fakes.memory_services import (
    FakeHindsight,
    FakeHoncho,
    FakeService,
    FakeSupermemory,
    Item,
    Request,
)
from tests.providers.services import SERVICES, served

REFERENCE = Path(__file__).parents[1] / "fakes" / "reference"


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A one-handler HTTP server on 127.0.0.1 for the test's length: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def shape(value: Any) -> Any:
    """The keys a JSON value holds, nested (a list by its first element)."""
    if isinstance(value, dict):
        return {key: shape(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def covers(fake: Any, reference: Any) -> bool:
    """Whether every key the reference shows is where it shows it in the fake's answer
    (a `metadata` object is the caller's own: its keys are not compared)."""
    if isinstance(reference, dict):
        return isinstance(fake, dict) and all(
            key in fake and (key == "metadata" or covers(fake[key], inner))
            for key, inner in reference.items()
        )
    if isinstance(reference, list):
        return isinstance(fake, list) and (  # (an empty list has no element to compare)
            not reference or not fake or covers(fake[0], reference[0])
        )
    return True


def reference(name: str) -> dict[str, Any]:
    """A stored example of a service's answer, and where it was published."""
    example: dict[str, Any] = json.loads((REFERENCE / f"{name}.json").read_text())
    assert example["source"].startswith("https://"), name
    return example


def as_memories(example: dict[str, Any]) -> dict[str, Any]:
    """OpenViking's example finds resources only; a memory is the same MatchedContext
    (the reference says so), under `memories`."""
    result = example["result"]
    found = [{**c, "context_type": "memory"} for c in result["resources"]]
    return {**example, "result": {**result, "memories": found, "resources": []}}


# the fake's own answer to the call the example shows, asked as the provider asks it
ASKED: dict[str, Any] = {
    "retaindb_search": lambda fake, space: httpx.post(
        f"{fake.base_url}/v1/memory/search",
        json={"project": "hermes", "user_id": space, "query": "concise", "top_k": 3},
        headers={"Authorization": f"Bearer {fake.api_key}"},
        timeout=5,
    ),
    "mem0_search": lambda fake, space: httpx.post(
        f"{fake.base_url}/v3/memories/search/",
        json={"query": "concise", "filters": {"user_id": space}, "top_k": 3},
        headers={"Authorization": f"Token {fake.api_key}"},
        timeout=5,
    ),
    "openviking_find": lambda fake, space: httpx.post(
        f"{fake.base_url}/api/v1/search/find",
        json={"query": "concise", "target_uri": "viking://~/memories", "limit": 3},
        headers={
            "X-API-Key": fake.api_key,
            "X-OpenViking-Account": "default",
            "X-OpenViking-User": space,
        },
        timeout=5,
    ),
}


@pytest.mark.parametrize("name", sorted(ASKED))
def test_each_fake_answers_in_the_shape_its_reference_shows(name: str) -> None:
    """Every key the published example shows is where it shows it in the fake's answer
    (and the provider finds the memory in that answer too)."""
    example = reference(name)
    if name == "openviking_find":
        example["response"] = as_memories(example["response"])
    with contextlib.closing(served(name.split("_", maxsplit=1)[0])) as running:
        service = next(running)
        provider = service.make()
        space = provider.space("u_00000000000000a1")
        try:
            provider.remember(space, "User prefers concise answers.")
            answer = ASKED[name](service.fake, space)
            assert answer.status_code == 200, answer.text
            assert covers(shape(answer.json()), shape(example["response"])), (answer.json(), name)
            found = provider.search(space, "concise answers", 3)
        finally:
            provider.close()
    assert any("concise answers" in text for text in found), found


class Published(BaseHTTPRequestHandler):
    """Answers every call with the published example for its path (`answers`, longest
    prefix first), and GET /v1/ping/ as Mem0's client asks when it is made."""

    answers: ClassVar[dict[str, Any]] = {}

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?")[0]
        if path == "/v1/ping/":
            found: Any = {"status": "ok", "org_id": "o", "project_id": "p", "user_email": None}
        else:
            prefix = max((p for p in self.answers if path.startswith(p)), key=len, default=None)
            found = self.answers[prefix] if prefix else {"detail": "not here"}
        body = json.dumps(found).encode()
        self.send_response(200 if found.get("detail") != "not here" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815 - http.server names its handlers so

    def log_message(self, *_: Any) -> None:
        pass


def provider_against(name: str, answers: dict[str, Any]) -> Iterator[ServiceProvider]:
    handler = type("Answers", (Published,), {"answers": answers})
    with serving(handler) as url:
        provider = SERVICES[name][1]({"api_key": "k", "base_url": url, "timeout_s": "3"})
        try:
            yield provider
        finally:
            provider.close()


def test_each_provider_reads_its_references_examples() -> None:
    """A server answering exactly the published examples: each provider reads the
    memories out of them (RetainDB's under `memory`, Mem0's `results`, OpenViking's
    `result.memories`), and Mem0's listing in the reference's form (a `total`, no
    `next`) is read whole."""
    retaindb = reference("retaindb_search")["response"]
    with contextlib.closing(provider_against("retaindb", {"/v1/memory/search": retaindb})) as it:
        assert next(it).search("space", "how should I reply?", 5) == [
            "User prefers concise answers."
        ]
    mem0 = {
        "/v3/memories/search/": reference("mem0_search")["response"],
        "/v3/memories/": reference("mem0_list")["response"],
    }
    with contextlib.closing(provider_against("mem0", mem0)) as it:
        provider = next(it)
        assert provider.search("alice", "hobbies?", 5) == [
            "Likes to play cricket and plays cricket on weekends."
        ]
        assert [kept.text for kept in provider.export("alex")] == [
            "Alex is planning a trip to San Francisco from July 1st to July 10th",
            "Alex prefers vegetarian restaurants",
        ]
    viking = as_memories(reference("openviking_find")["response"])
    with contextlib.closing(provider_against("openviking", {"/api/v1/search/find": viking})) as it:
        found = next(it).search("space", "api docs", 5)
    assert len(found) == 1 and found[0].startswith("This document is an API documentation")


def test_a_mem0_listing_without_next_is_read_to_its_total() -> None:
    """Pages in the reference's form (`results` and `total`, no `next`): the export
    goes on while pages come full and stops at the total, so a link copies everything."""
    from hermes.providers.mem0 import PAGE_SIZE

    total = PAGE_SIZE * 2 + 7
    asked: list[int] = []

    class Pages(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            query = parse_qs(urlsplit(self.path).query)
            if self.path.startswith("/v1/ping/"):
                found: Any = {"status": "ok", "org_id": "o", "project_id": "p"}
            else:
                page = int(query["page"][0])
                asked.append(page)
                first = (page - 1) * PAGE_SIZE
                ids = range(first, min(first + PAGE_SIZE, total))
                found = {"results": [{"id": f"m{i}", "memory": f"fact {i}"} for i in ids]}
                found["total"] = total
            body = json.dumps(found).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 - http.server names its handlers so

        def log_message(self, *_: Any) -> None:
            pass

    with serving(Pages) as url:
        provider = SERVICES["mem0"][1]({"api_key": "k", "base_url": url, "timeout_s": "3"})
        try:
            kept = provider.export("alex")
        finally:
            provider.close()
    assert len(kept) == total and asked == [1, 2, 3]


def test_a_key_a_service_echoes_in_its_error_is_never_kept_or_shown() -> None:
    """A service that repeats the (wrong) key in its refusal: the provider's probe (what
    doctor shows) and the host's stored error carry the key masked."""
    from hermes.providers.base import scrub, secret_values
    from hermes.providers.host import _describe

    wrong = "sk-wrong-0123456789abcdef"
    for name in ("retaindb", "openviking"):
        with contextlib.closing(served(name)) as running:
            service = next(running)
            service.fake.echo_key = True
            provider = service.make(api_key=wrong)
            said = provider.probe()
            assert said and wrong not in said and "***" in said, (name, said)
            try:
                provider.search(provider.space("u_00000000000000a1"), "x", 3)
            except Exception as exc:  # what the outbox keeps
                kept = scrub(_describe(exc, 5.0), secret_values(provider))
                assert wrong not in kept and "***" in kept, kept
            else:
                raise AssertionError("a wrong key was accepted")
            finally:
                provider.close()


def test_an_answer_past_the_bound_is_not_read_whole() -> None:
    """A service answering a search with tens of megabytes (a million results): refused
    once MAX_ANSWER_BYTES have come, without reading (or parsing) the rest."""
    from hermes.providers.service import MAX_ANSWER_BYTES, ServiceError

    sent: list[int] = []

    class Flood(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            piece = b'{"memory": {"content": "' + b"x" * 65_000 + b'"}},'
            try:
                self.wfile.write(b"10\r\n" + b'{"results": [   ' + b"\r\n")
                for _ in range(MAX_ANSWER_BYTES // len(piece) * 4):
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    sent.append(len(piece))
            except (BrokenPipeError, ConnectionResetError):
                return  # the client stopped reading: as it should

        def log_message(self, *_: Any) -> None:
            pass

    with serving(Flood) as url:
        provider = RetainDBProvider({"api_key": "k", "base_url": url, "timeout_s": "10"})
        try:
            provider.search("space", "everything", 5)
        except ServiceError as exc:
            assert "not read" in str(exc)
        else:
            raise AssertionError("a flood was read whole")
        finally:
            provider.close()
    assert sum(sent) < MAX_ANSWER_BYTES * 4  # the server was cut off before its end


def test_the_wait_a_service_asks_for_is_read_from_its_refusal() -> None:
    """A 429 with Retry-After (seconds, or an HTTP date) from a REST service: the error
    the outbox's delivery sees carries it, and the host waits at least that long
    (`asked_wait`, bounded to an hour)."""
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from hermes.providers.host import RETRY_AFTER_MAX_S, asked_wait
    from hermes.providers.service import ServiceError

    later = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    for said, low, high in (("7", 7, 7), (later, 100, 121), ("86400", 3600, 3600), ("soon", 0, 0)):
        with contextlib.closing(served("retaindb")) as running:
            service = next(running)
            service.fake.retry_after = said
            service.fake.fail(1, 429)
            provider = service.make()
            try:
                provider.search(provider.space("u_00000000000000a1"), "x", 3)
            except ServiceError as exc:
                assert low <= asked_wait(exc) <= high, (said, asked_wait(exc))
            else:
                raise AssertionError("the injected 429 did not come")
            finally:
                provider.close()
    assert RETRY_AFTER_MAX_S == 3600
    assert asked_wait(ValueError("no answer at all")) == 0


def test_a_replayed_turn_is_kept_once_by_the_services_that_take_its_key() -> None:
    """A turn sent again (its answer was lost, the outbox tries again) with the same key:
    Hindsight replaces the document, and Supermemory, whose SDK says a reused document id
    *appends*, is not sent it again; either way the service keeps the turn once."""
    messages = [{"role": "user", "content": "My heron is called Ossian"}]
    for name in ("hindsight", "supermemory"):
        with contextlib.closing(served(name)) as running:
            service = next(running)
            provider = service.make()
            space = provider.space("u_00000000000000a1")
            try:
                for _ in range(3):
                    provider.ingest(space, "s_1", "turn-key-1", messages)
            finally:
                provider.close()
            kept = service.fake.texts(space)
            assert sum(text.count("Ossian") for text in kept) == 1, (name, kept)


class LoseDreaming(FakeSupermemory):
    def _document_system(self, item: Item) -> dict[str, Any]:
        return self._system(item)  # a listing's `system` without its required dreamingStatus


class RecallWithoutText(FakeHindsight):
    def _recall(self, match: re.Match[str], request: Request) -> Any:
        found = super()._recall(match, request)
        return {"results": [{k: v for k, v in r.items() if k != "text"} for r in found["results"]]}


class ConclusionWithoutContent(FakeHoncho):
    def _conclusion(self, peer: str, item: Item) -> dict[str, Any]:
        return {k: v for k, v in super()._conclusion(peer, item).items() if k != "content"}


@pytest.mark.parametrize(
    ("name", "broken"),
    [
        ("supermemory", LoseDreaming),
        ("hindsight", RecallWithoutText),
        ("honcho", ConclusionWithoutContent),
    ],
)
def test_an_answer_the_sdk_does_not_describe_fails_the_call(
    name: str, broken: type[FakeService]
) -> None:
    """The check on the fakes bites: a fake that leaves out a field its SDK's types
    require makes the provider's call fail (Supermemory's SDK through the validating
    parser of conftest.py; Hindsight's and Honcho's validate on their own), so the
    contract suite passing means the fakes answer what the SDKs parse."""
    fake = broken().start()
    provider = SERVICES[name][1](
        {"api_key": fake.api_key, "base_url": fake.base_url, "timeout_s": "3"}
    )
    try:
        space = provider.space("u_00000000000000a1")
        with pytest.raises(Exception) as failed:  # the write, or the read that follows
            provider.put_note(space, Note("k1", "memory", "My heron is called Ossian"))
            provider.notes(space) if name == "supermemory" else provider.search(space, "heron", 3)
        assert "valid" in repr(failed.value).lower() or "pars" in repr(failed.value).lower()
    finally:
        provider.close()
        fake.stop()
