"""The REST-only services' fakes answer in the shapes their published API references
show (the examples stored under tests/fakes/reference/, each with its source), and the
providers read those examples: a fake written from our own reading of a service cannot
pass a provider that misreads it."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from hermes.providers.retaindb import RetainDBProvider
from tests.providers.services import served

REFERENCE = Path(__file__).parents[1] / "fakes" / "reference"


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A one-handler HTTP server on 127.0.0.1 for the test's length: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
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
    """Whether every key the reference shows is where it shows it in the fake's answer."""
    if isinstance(reference, dict):
        return isinstance(fake, dict) and all(
            key in fake and covers(fake[key], inner) for key, inner in reference.items()
        )
    if isinstance(reference, list):
        return isinstance(fake, list) and (
            not reference or (bool(fake) and covers(fake[0], reference[0]))
        )
    return True


def test_the_retaindb_fake_searches_as_the_reference_shows() -> None:
    example = json.loads((REFERENCE / "retaindb_search.json").read_text())
    assert example["source"].startswith("https://www.retaindb.com/docs/api/")
    with contextlib.closing(served("retaindb")) as running:
        service = next(running)
        provider = service.make()
        space = provider.space("u_00000000000000a1")
        provider.remember(space, "User prefers concise answers.")
        answer = httpx.post(
            f"{service.fake.base_url}/v1/memory/search",
            json={"project": "hermes", "user_id": space, "query": "concise", "top_k": 3},
            headers={"Authorization": f"Bearer {service.fake.api_key}"},
            timeout=5,
        ).json()
        try:
            assert covers(shape(answer), shape(example["response"])), (answer, example)
            found = provider.search(space, "concise answers", 3)
        finally:
            provider.close()
        assert found == ["User prefers concise answers."]


def test_the_retaindb_provider_reads_the_references_example() -> None:
    """A server answering exactly the reference's example: its result is read."""
    example = json.loads((REFERENCE / "retaindb_search.json").read_text())
    body = json.dumps(example["response"]).encode()

    class Answer(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    with serving(Answer) as url:
        provider = RetainDBProvider({"api_key": "k", "base_url": url, "timeout_s": "3"})
        try:
            found = provider.search("space", "how should I reply?", 5)
        finally:
            provider.close()
    assert found == ["User prefers concise answers."]


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
