"""A local OpenAI-compatible HTTP server for tests: the real `openai` client talks to it.

Replies are scripted per test (text, tool calls, HTTP errors with Retry-After, delays,
dropped connections, malformed bodies); every request body is recorded.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str | None = "ok"
    tool_calls: list[dict[str, Any]] | None = None
    status: int = 200
    retry_after: float | None = None
    delay: float = 0.0
    drop_connection: bool = False
    prompt_tokens: int = 10
    completion_tokens: int = 5
    headers: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def tool_call(name: str, arguments: str | dict[str, Any], call_id: str = "call_1") -> Reply:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        return Reply(text=None, tool_calls=[call])


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: deque[Reply] = deque()
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        self.default = Reply()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.block_on_close = False  # a scripted slow reply must not hold up stop()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def push(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self.script:
                return self.script.popleft()
        return self.responder(body) if self.responder else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # headers and body go out in two writes: without this, Nagle's algorithm
                # and delayed ACKs add ~40 ms to every response
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = fake._next(body)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.drop_connection:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if reply.status != 200:
                    payload = {"error": {"message": f"fake error {reply.status}", "type": "fake"}}
                    headers = dict(reply.headers)
                    if reply.retry_after is not None:
                        headers["Retry-After"] = f"{reply.retry_after:g}"
                    self._send(reply.status, payload, headers)
                    return
                self._send(200, _completion(body, reply), reply.headers)

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)  # the client may have given up (timeout, cancel)

        return Handler


def _completion(request: dict[str, Any], reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }
