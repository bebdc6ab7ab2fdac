"""A local OpenAI-compatible HTTP server for tests: the real `openai` client talks to it.

Replies are scripted per test (text, tool calls, HTTP errors with Retry-After, delays,
dropped connections, malformed bodies); every request body is recorded.

A request with `stream: true` is answered as server-sent events, the text in pieces
(`Reply.pieces`, or ~12 characters each), `piece_delay` apart; `break_after` drops the
connection after that many pieces, `stream_error_after` sends an error event there
instead (both: a stream interrupted mid-way).

A chat request from the memory guard's judge (its system prompt begins with
JUDGE_MARKER) is answered apart from the script, as a separate model would: from
`judge_script`, else by `judge` (a function of the note: a scripted judge), else allowed;
`judge_requests` records the notes it was shown.

POST /v1/embeddings answers with deterministic vectors: a hashed bag of words (Latin
words and CJK characters), with `synonyms` folding words onto one meaning so that a
paraphrase sharing no word with its answer is still near it, as with a real model.
`embed_dim` sets the size (a model change behind the same name: change it); faults are
scripted in `embed_script` or by `embed_refuse` (inputs containing it get HTTP 400).
`reads` names the scripts the fake model understands: the two halves of each of those
scripts' probe pairs (hermes/scripts.py, how a model's reading is measured) get one
meaning, as with a real model that reads them; the other scripts' probes get unrelated
vectors each, as from a model that cannot read them. Latin by default.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from hermes.fence import fenced as fenced_text
from hermes.memory.scan_judge import JUDGE_MARKER
from hermes.scripts import PROBES
from tests.fakes.http_base import JsonHandler, ThreadedHttp


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
    raw_body: bytes | None = None  # sent as is with status 200 (not JSON, garbage)
    pieces: list[str] | None = None  # a streamed reply's text pieces (default: ~12 chars)
    piece_delay: float = 0.0
    break_after: int | None = None  # streamed: drop the connection after this many pieces
    stream_error_after: int | None = None  # streamed: an error event after this many

    @staticmethod
    def tool_call(name: str, arguments: str | dict[str, Any], call_id: str = "call_1") -> Reply:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        return Reply(text=None, tool_calls=[call])


def verdict(answer: str, category: str = "none") -> str:
    """A judge's answer in the format the memory guard checks."""
    return json.dumps({"verdict": answer, "category": category})


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []  # chat completions received
        self.probes = 0  # GET /models health checks received
        self.script: deque[Reply] = deque()
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        self.default = Reply()
        self.embed_requests: list[dict[str, Any]] = []
        self.embed_script: deque[Reply] = deque()
        self.embed_dim = 64
        self.embed_refuse: str | None = None
        self.synonyms: dict[str, str] = {}
        self.reads: set[str] = {"Latin"}
        self.transcript = "this is what the voice note said"
        self.transcribe_requests: list[dict[str, Any]] = []  # model, filename, bytes
        self.transcribe_script: deque[Reply] = deque()
        self.judge_requests: list[str] = []  # the notes the memory guard's judge was shown
        self.judge_contexts: list[str] = []  # what it was told of each note's origin ("")
        self.judge_script: deque[Reply] = deque()
        self.judge: Callable[[str], Reply] | None = None
        self._lock = threading.Lock()
        self._http = ThreadedHttp(self._handler())

    @property
    def base_url(self) -> str:
        return f"{self._http.root}/v1"

    def push(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def start(self) -> FakeOpenAI:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    def _next(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or [{}]
        if str(messages[0].get("content", "")).startswith(JUDGE_MARKER):
            return self._judged(str(messages[-1].get("content", "")))
        with self._lock:
            self.requests.append(body)
            if self.script:
                return self.script.popleft()
        return self.responder(body) if self.responder else self.default

    def _judged(self, content: str) -> Reply:
        # what the gateway says of the note's origin, if anything, then the note's fence
        context, split, rest = content.rpartition("\n\n<note-")
        fenced = "<note-" + rest if split else content
        found = fenced_text(fenced)  # the judge's note, in its fence (hermes/fence.py)
        assert found is not None and found[0].startswith("note-"), fenced[:200]
        note = json.loads(found[1])
        with self._lock:
            self.judge_requests.append(note)
            self.judge_contexts.append(context)
            if self.judge_script:
                return self.judge_script.popleft()
        return self.judge(note) if self.judge else Reply(text=verdict("allow"))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802 - the health probe: GET /models
                with fake._lock:
                    fake.probes += 1
                model = {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}
                self.send_json(200, {"object": "list", "data": [model]})

            def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
                raw = self.body()
                if self.path.rstrip("/").endswith("/audio/transcriptions"):
                    self._transcribe(raw)
                    return
                body = json.loads(raw or b"{}")
                if self.path.rstrip("/").endswith("/embeddings"):
                    self._embeddings(body)
                    return
                reply = fake._next(body)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.drop_connection:
                    self.drop()
                    return
                if reply.raw_body is not None:
                    self.send_raw(200, reply.raw_body, reply.headers)
                    return
                if reply.status != 200:
                    payload = {"error": {"message": f"fake error {reply.status}", "type": "fake"}}
                    headers = dict(reply.headers)
                    if reply.retry_after is not None:
                        headers["Retry-After"] = f"{reply.retry_after:g}"
                    self.send_json(reply.status, payload, headers)
                    return
                if body.get("stream"):
                    self._stream(body, reply)
                    return
                self.send_json(200, _completion(body, reply), reply.headers)

            def _stream(self, body: dict[str, Any], reply: Reply) -> None:
                """Server-sent events in a chunked body, as real endpoints send them."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def write(data: bytes) -> None:
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()

                try:
                    for index, event in enumerate(_stream_events(body, reply)):
                        if reply.break_after is not None and index == reply.break_after:
                            self.drop()  # mid-body: the client sees an incomplete stream
                            return
                        if reply.stream_error_after == index:
                            error = {"error": {"message": "fake overload", "type": "server_error"}}
                            write(f"data: {json.dumps(error)}\n\n".encode())
                            break
                        write(f"data: {json.dumps(event)}\n\n".encode())
                        if reply.piece_delay:
                            time.sleep(reply.piece_delay)
                    else:
                        write(b"data: [DONE]\n\n")
                    write(b"")  # the last chunk
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client went away (a cancelled turn)

            def _transcribe(self, raw: bytes) -> None:
                """multipart/form-data: `model` and `file`; answers {"text": ...}."""
                fields = _multipart(raw, self.headers.get("Content-Type", ""))
                with fake._lock:
                    fake.transcribe_requests.append(fields)
                    reply = fake.transcribe_script.popleft() if fake.transcribe_script else None
                if reply is not None and reply.status != 200:
                    error = {"error": {"message": f"fake error {reply.status}", "type": "fake"}}
                    self.send_json(reply.status, error)
                    return
                self.send_json(200, {"text": reply.text if reply is not None else fake.transcript})

            def _embeddings(self, body: dict[str, Any]) -> None:
                with fake._lock:
                    fake.embed_requests.append(body)
                    reply = fake.embed_script.popleft() if fake.embed_script else None
                    dim, refuse = body.get("dimensions") or fake.embed_dim, fake.embed_refuse
                texts = body.get("input") or []
                if reply is not None and reply.delay:
                    time.sleep(reply.delay)
                if reply is not None and reply.drop_connection:
                    self.drop()
                    return
                if reply is not None and reply.status != 200:
                    error = {"error": {"message": f"fake error {reply.status}", "type": "fake"}}
                    self.send_json(reply.status, error)
                    return
                if refuse and any(refuse in text for text in texts):
                    self.send_json(400, {"error": {"message": "input refused", "type": "fake"}})
                    return
                data = [
                    {"object": "embedding", "index": i, "embedding": fake.vector(text, dim)}
                    for i, text in enumerate(texts)
                ]
                usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
                self.send_json(
                    200,
                    {"object": "list", "data": data, "model": body.get("model"), "usage": usage},
                )

        return Handler

    def vector(self, text: str, dim: int) -> list[float]:
        """The deterministic embedding of `text`: hashed words, synonyms folded."""
        values = [0.0] * dim
        pair = _PROBE_PAIRS.get(text)
        if pair is not None:  # read: one meaning per pair; unread: one noise per text
            key = f"{pair[0]}-{pair[1]}" if pair[0] in self.reads else text
            seed = hashlib.sha256(key.encode()).digest()
            signs = [1.0 if seed[i % 32] >> (i // 32 % 8) & 1 else -1.0 for i in range(dim)]
            return [v / math.sqrt(dim) for v in signs]
        for word in _WORDS.findall(text.casefold()):
            meaning = self.synonyms.get(word, word)
            digest = hashlib.sha256(meaning.encode()).digest()
            slot = int.from_bytes(digest[:4], "big") % dim
            values[slot] += 1.0 if digest[4] % 2 else -1.0
        norm = math.sqrt(sum(v * v for v in values)) or 1.0
        return [v / norm for v in values] if any(values) else [1.0] + [0.0] * (dim - 1)


def _multipart(raw: bytes, content_type: str) -> dict[str, Any]:
    """The parts of a multipart/form-data body: text fields, and the file's name and size."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if match is None:
        return {}
    fields: dict[str, Any] = {}
    for part in raw.split(b"--" + match.group(1).encode()):
        head, _, data = part.partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]+)"', head)
        if name is None:
            continue
        data = data.removesuffix(b"\r\n")
        filename = re.search(rb'filename="([^"]*)"', head)
        if filename is not None:
            fields["filename"] = filename.group(1).decode()
            fields["file_bytes"] = len(data)
        else:
            fields[name.group(1).decode()] = data.decode(errors="replace")
    return fields


_PROBE_PAIRS = {
    half: (script, index)
    for script, pairs in PROBES.items()
    for index, pair in enumerate(pairs)
    for half in pair
}
_WORDS = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[^\W\d_]{3,}|\d+")


def _stream_events(request: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
    """The chunks of a streamed reply: a role, the text pieces, tool calls, the finish,
    and the usage when `stream_options.include_usage` asked for it."""
    base = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.get("model", "fake"),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    text = reply.text or ""
    pieces = (
        reply.pieces
        if reply.pieces is not None
        else [text[i : i + 12] for i in range(0, len(text), 12)]
    )
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in pieces]
    for index, call in enumerate(reply.tool_calls or []):
        events.append(chunk({"tool_calls": [{**call, "index": index}]}))
    events.append(chunk({}, "tool_calls" if reply.tool_calls else "stop"))
    if (request.get("stream_options") or {}).get("include_usage"):
        usage = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }
        events.append({**base, "choices": [], "usage": usage})
    return events


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
