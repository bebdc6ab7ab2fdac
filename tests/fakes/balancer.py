"""A load balancer in front of several gateway processes, and a platform's push delivery.

`Balancer`: a small HTTP reverse proxy on 127.0.0.1, as nginx or Caddy would be in front
of the gateways' HTTP servers: each request goes to the next backend in turn; a backend
that refuses the connection (dead) is skipped for the next one (nginx's
`proxy_next_upstream error`); `duplicate_every` also sends every n-th request to a
second backend (the copy's answer is dropped): a delivery that reaches two instances.

`Pusher`: how Telegram and Slack deliver webhooks: each chat's updates one after the
other, the next only once the previous got a 2xx, retried (after `retry_s`) while the
answer is an error or no answer; different chats at once.
"""

from __future__ import annotations

import itertools
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fakes.http_base import POLL_S

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer (a pusher stopping) is no error of ours."""


class Balancer:
    def __init__(self, backends: list[str] | None = None, *, duplicate_every: int = 0) -> None:
        """`backends`: base URLs (http://127.0.0.1:PORT)."""
        self.backends = list(backends or [])
        self.duplicate_every = duplicate_every
        self.requests = 0
        self.duplicated = 0
        self.by_backend: dict[str, int] = {}
        self._turn = itertools.count()
        self._lock = threading.Lock()
        balancer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                status, answer = balancer.forward(self.path, body, headers)
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_S,), daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Balancer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def forward(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        with self._lock:
            self.requests += 1
            number = self.requests
            start = next(self._turn)
            order = [
                self.backends[(start + i) % len(self.backends)] for i in range(len(self.backends))
            ]
        duplicate = self.duplicate_every and number % self.duplicate_every == 0
        for index, backend in enumerate(order):
            try:
                status, answer = _post(backend + path, body, headers)
            except OSError:  # refused: the instance is down; the next one
                continue
            with self._lock:
                self.by_backend[backend] = self.by_backend.get(backend, 0) + 1
            if duplicate and len(order) > 1:
                copy = order[(index + 1) % len(order)]
                threading.Thread(
                    target=self._copy, args=(copy + path, body, headers), daemon=True
                ).start()
            return status, answer
        return 502, b"no backend answered"

    def _copy(self, url: str, body: bytes, headers: dict[str, str]) -> None:
        try:
            _post(url, body, headers)
            with self._lock:
                self.duplicated += 1
        except OSError:
            pass


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


class Pusher:
    """Deliver bodies to `url` per chat, in order, each until it gets a 2xx."""

    def __init__(
        self,
        url: str,
        headers: Callable[[bytes], dict[str, str]],
        *,
        retry_s: float = 0.5,
        give_up_s: float = 120.0,
    ) -> None:
        self.url, self.headers, self.retry_s, self.give_up_s = url, headers, retry_s, give_up_s
        self.attempts = 0
        self.failures: list[str] = []
        self._queues: dict[str, deque[bytes]] = {}
        self._busy: set[str] = set()
        self._lock = threading.Condition()
        self._idle_count = 0

    def deliver(self, chat: str, body: bytes) -> None:
        with self._lock:
            self._queues.setdefault(chat, deque()).append(body)
            if chat in self._busy:
                return
            self._busy.add(chat)
        threading.Thread(target=self._drain, args=(chat,), daemon=True).start()

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._busy:
                left = deadline - time.monotonic()
                assert left > 0, f"deliveries still pending for {sorted(self._busy)}"
                self._lock.wait(left)

    def _drain(self, chat: str) -> None:
        while True:
            with self._lock:
                queue = self._queues[chat]
                if not queue:
                    self._busy.discard(chat)
                    self._lock.notify_all()
                    return
                body = queue[0]
            self._send(body)
            with self._lock:
                queue.popleft()

    def _send(self, body: bytes) -> None:
        deadline = time.monotonic() + self.give_up_s
        while time.monotonic() < deadline:
            self.attempts += 1
            try:
                status, _ = _post(self.url, body, self.headers(body))
                if 200 <= status < 300:
                    return
            except OSError:
                pass
            time.sleep(self.retry_s)
        self.failures.append(body.decode(errors="replace")[:200])
