"""Plumbing shared by the fakes served from a thread with http.server."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class FormPart:
    """One field of a multipart/form-data body: a file's has its file name and type."""

    data: bytes
    filename: str | None = None
    content_type: str | None = None

    @property
    def text(self) -> str:
        return self.data.decode()


def form_data(body: bytes, content_type: str) -> dict[str, FormPart]:
    """A multipart/form-data body's fields by name (RFC 7578), read with the standard
    library's MIME parser as a server would: the boundary from `content_type`."""
    message = BytesParser(policy=policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    if not message.is_multipart():
        raise ValueError(f"not a multipart body: {content_type}")
    fields: dict[str, FormPart] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise ValueError("a form field without a name")
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        typed = part.get("Content-Type")
        fields[name] = FormPart(data, part.get_filename(), typed and part.get_content_type())
    return fields


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # headers and body go out in two writes: without this, Nagle's algorithm and
        # delayed ACKs add ~40 ms to every response
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args: Any) -> None:
        pass

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self.send_raw(status, json.dumps(payload).encode(), headers)

    def send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        """`data` as the body, labelled JSON whatever it is (a broken server)."""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)  # the client may have given up (timeout, cancel)

    def drop(self) -> None:
        """Close the connection without an answer (a dropped connection)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


POLL_S = 0.02


class ThreadedHttp:
    """A ThreadingHTTPServer on 127.0.0.1 that a slow handler never holds up on stop."""

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        # a stop waits for the serving loop to look at its flag: every 20 ms, not 0.5 s
        self._thread = threading.Thread(
            target=self.server.serve_forever, args=(POLL_S,), daemon=True
        )

    @property
    def root(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
