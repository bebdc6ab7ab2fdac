"""A local Slack: Web API over HTTP and Socket Mode over a websocket, in its own thread.

The real slack_sdk / slack-bolt talk to it: `auth.test`, `apps.connections.open` (gives
the ws:// URL), `chat.postMessage`, `chat.update` and `chat.delete` (on the bot's
messages; `messages` holds what each shows now), an external file upload as
slack_sdk's files_upload_v2 makes it (`files.getUploadURLExternal`, the bytes POSTed to
the upload URL, `files.completeUploadExternal` sharing it: kept in `shared`); events
are pushed as `events_api` envelopes and the acks recorded. Faults: 429 with
Retry-After, dropped websocket (the client reconnects).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from aiohttp import WSMsgType, web

from tests.fakes.aio_thread import AioFake, AioThread
from tests.fakes.balancer import Pusher

BOT_USER = "UBOT"


@dataclass
class SlackFault:
    method: str
    status: int = 429
    error: str = "ratelimited"
    retry_after: int | None = 1


@dataclass
class FakeSlack(AioFake):
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    acks: list[str] = field(default_factory=list)
    faults: deque[SlackFault] = field(default_factory=deque)
    # per method, how long each next call waits before its answer (first first), as a
    # slow or congested link answers: later calls may be answered before earlier ones
    latency: dict[str, deque[float]] = field(default_factory=dict)
    connections: int = 0
    messages: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, ts): text
    timeline: list[tuple[str, float]] = field(default_factory=list)  # (method, monotonic)
    # (channel, ts, params) of each chat.postMessage
    posts: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)  # download path: data
    downloads: list[tuple[str, str]] = field(default_factory=list)  # (path, Authorization)
    broken_downloads: set[str] = field(default_factory=set)
    pusher: Pusher | None = None  # HTTP mode: see events_to
    # files the bot shared (files.completeUploadExternal): channel, name, data, the
    # initial comment, thread_ts
    shared: list[tuple[str, str, bytes, str, str | None]] = field(default_factory=list)
    uploads: dict[str, dict[str, Any]] = field(default_factory=dict)  # file id: upload

    def __post_init__(self) -> None:
        self._sockets: list[web.WebSocketResponse] = []
        self._last_ts = 0  # microseconds: a message's ts is when it was sent, unique
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/link", self._socket)
        app.router.add_get("/files/{tail:.*}", self._file)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        self._server = AioThread(app)

    # -- lifecycle -------------------------------------------------------------------------

    def _next_ts(self) -> str:
        """A new message's ts as Slack makes it: the time it was sent ("seconds.micros"),
        unique and growing."""
        self._last_ts = max(self._last_ts + 1, int(time.time() * 1_000_000))
        return f"{self._last_ts // 1_000_000}.{self._last_ts % 1_000_000:06d}"

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    # -- what users do -------------------------------------------------------------------

    def message(
        self,
        text: str,
        *,
        user: str = "U1",
        channel: str = "D1",
        channel_type: str = "im",
        thread_ts: str | None = None,
        event_type: str = "message",
        ts: str | None = None,
        event_id: str | None = None,
        retry_attempt: int = 0,
        files: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        ts = ts or self._next_ts()
        event: dict[str, Any] = {
            "type": event_type,
            "user": user,
            "text": text,
            "ts": ts,
            "channel": channel,
            "event_ts": ts,
        }
        if event_type == "message":
            event["channel_type"] = channel_type
        if thread_ts:
            event["thread_ts"] = thread_ts
        if files:
            event["files"], event["subtype"] = files, "file_share"
        body = {
            "token": "x",
            "team_id": "T1",
            "api_app_id": "A1",
            "type": "event_callback",
            "event": event,
            "event_id": event_id or f"Ev{ts.replace('.', '')}{event_type}",
            "event_time": int(time.time()),
        }
        self.push(body, retry_attempt)
        return body

    def slash_command(self, text: str, user: str = "U1", channel: str = "C1") -> str:
        payload = {
            "token": "x",
            "team_id": "T1",
            "channel_id": channel,
            "user_id": user,
            "user_name": "ann",
            "command": "/hermes",
            "text": text,
            "api_app_id": "A1",
            "trigger_id": f"trig-{time.monotonic_ns()}",
            "response_url": "https://example.invalid",
        }
        return self.push(payload, kind="slash_commands")

    def press(self, channel: str, ts: str, value: str, *, user: str = "U1", index: int = 0) -> str:
        """A press of button `index` under the bot's message `ts` (a block_actions payload)."""
        action_ts = f"{time.time():.6f}"
        payload = {
            "type": "block_actions",
            "user": {"id": user, "username": "ann", "name": "ann", "team_id": "T1"},
            "api_app_id": "A1",
            "token": "x",
            "container": {"type": "message", "message_ts": ts, "channel_id": channel},
            "trigger_id": f"trig-{time.monotonic_ns()}",
            "team": {"id": "T1", "domain": "fake"},
            "channel": {"id": channel, "name": "directmessage"},
            "message": {"type": "message", "ts": ts, "text": self.messages.get((channel, ts), "")},
            "actions": [
                {
                    "type": "button",
                    "action_id": f"hermes_{index}",
                    "block_id": "b1",
                    "value": value,
                    "action_ts": action_ts,
                }
            ],
        }
        return self.push(payload, kind="interactive")

    def add_file(
        self, data: bytes, name: str, mimetype: str, *, size: int | None = None
    ) -> dict[str, Any]:
        """A file users can share: its object for a message's `files`."""
        path = f"F{len(self.files) + 1}/{name}"
        self.files[path] = data
        return {
            "id": f"F{len(self.files)}",
            "name": name,
            "mimetype": mimetype,
            "size": len(data) if size is None else size,
            "url_private": f"http://127.0.0.1:{self.port}/files/{path}",
            "url_private_download": f"http://127.0.0.1:{self.port}/files/{path}?download=1",
        }

    async def _file(self, request: web.Request) -> web.Response:
        path = request.match_info["tail"]
        self.downloads.append((path, request.headers.get("Authorization", "")))
        if path in self.broken_downloads:
            return web.Response(status=500, text="broken")
        if request.headers.get("Authorization") != "Bearer xoxb-t":
            return web.Response(status=200, text="<html>sign in</html>", content_type="text/html")
        if path not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[path], content_type="application/octet-stream")

    def events_to(self, url: str, signing_secret: str) -> None:
        """HTTP mode (the Events API): from now on events are POSTed to `url`, signed,
        each channel's in order, retried until answered 2xx."""

        def headers(body: bytes) -> dict[str, str]:
            ts = str(int(time.time()))
            base = f"v0:{ts}:".encode() + body
            digest = hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
            return {
                "Content-Type": "application/json",
                "X-Slack-Request-Timestamp": ts,
                "X-Slack-Signature": f"v0={digest}",
            }

        self.pusher = Pusher(url, headers)

    def push(self, body: dict[str, Any], retry_attempt: int = 0, kind: str = "events_api") -> str:
        if self.pusher is not None and kind == "events_api":
            channel = str((body.get("event") or {}).get("channel", ""))
            self.pusher.deliver(channel, json.dumps(body).encode())
            return str(body.get("event_id", ""))
        envelope_id = f"env-{time.monotonic_ns()}"
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": body,
            "accepts_response_payload": False,
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
        }
        self._server.call(self._broadcast(envelope))
        return envelope_id

    def drop_connections(self) -> None:
        async def close_all() -> None:
            for ws in list(self._sockets):
                await ws.close()

        self._server.call(close_all())

    def posted(self) -> list[dict[str, Any]]:
        return [p for m, p in self.calls if m == "chat.postMessage"]

    def wait_connected(self, count: int = 1, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.connections < count or not self._sockets:
            assert time.monotonic() < deadline, "the app never connected over Socket Mode"
            time.sleep(0.05)

    # -- server side ---------------------------------------------------------------------

    async def _broadcast(self, envelope: dict[str, Any]) -> None:
        deadline = time.monotonic() + 10
        while not self._sockets and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for ws in list(self._sockets):
            await ws.send_str(json.dumps(envelope))

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        raw = await request.text()
        if "json" in request.headers.get("Content-Type", ""):
            params = json.loads(raw or "{}")
        else:
            params = {k: v[0] for k, v in parse_qs(raw).items()}
        params = {**dict(request.query), **params}  # some methods send their arguments in the URL
        self.calls.append((method, params))
        self.timeline.append((method, time.monotonic()))
        if delays := self.latency.get(method):
            await asyncio.sleep(delays.popleft())
        fault = next((f for f in self.faults if f.method == method), None)
        if fault:
            self.faults.remove(fault)
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else {}
            return web.json_response(
                {"ok": False, "error": fault.error}, status=fault.status, headers=headers
            )
        return web.json_response(self._result(method, params))

    def _result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:  # noqa: PLR0911 - a route table
        if method == "auth.test":
            return {
                "ok": True,
                "url": "https://fake.slack/",
                "team": "T",
                "user": "hermes",
                "team_id": "T1",
                "user_id": BOT_USER,
                "bot_id": "BBOT",
            }
        if method == "apps.connections.open":
            return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link"}
        if method == "conversations.open":
            return {"ok": True, "channel": {"id": f"D{params.get('users')}"}}
        if method in ("chat.update", "chat.delete"):
            key = (str(params.get("channel")), str(params.get("ts")))
            if key not in self.messages:
                return {"ok": False, "error": "message_not_found"}
            if method == "chat.delete":
                del self.messages[key]
                return {"ok": True, "channel": key[0], "ts": key[1]}
            self.messages[key] = str(params.get("text"))
            return {"ok": True, "channel": key[0], "ts": key[1], "text": params.get("text")}
        if method == "files.getUploadURLExternal":
            file_id = f"F{len(self.uploads) + 1:08d}"
            self.uploads[file_id] = {
                "name": params["filename"],
                "length": int(params["length"]),
                "data": None,
            }
            return {
                "ok": True,
                "upload_url": f"http://127.0.0.1:{self.port}/upload/v1/{file_id}",
                "file_id": file_id,
            }
        if method == "files.completeUploadExternal":
            return self._complete_upload(params)
        if method == "chat.postMessage":
            ts = self._next_ts()
            self.messages[(str(params.get("channel")), ts)] = str(params.get("text"))
            self.posts.append((str(params.get("channel")), ts, params))
            return {
                "ok": True,
                "channel": params.get("channel"),
                "ts": ts,
                "message": {
                    "type": "message",
                    "text": params.get("text"),
                    "ts": ts,
                    "bot_id": "BBOT",
                    "user": BOT_USER,
                },
            }
        return {"ok": True}

    async def _upload(self, request: web.Request) -> web.Response:
        """Step 2 of an external upload: the file's bytes POSTed to its upload URL."""
        upload = self.uploads.get(request.match_info["file_id"])
        data = await request.read()
        if upload is None:
            return web.Response(status=404, text="upload not found")
        if len(data) != upload["length"]:
            return web.Response(status=400, text="length does not match")
        upload["data"] = data
        return web.Response(text=f"OK - {len(data)}")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        done = []
        for item in json.loads(params["files"]):
            upload = self.uploads.get(item["id"])
            if upload is None or upload["data"] is None:
                return {"ok": False, "error": "file_not_found"}
            done.append((item, upload))
        channel = params.get("channel_id")
        files = []
        for item, upload in done:
            if channel:
                comment = str(params.get("initial_comment") or "")
                thread = params.get("thread_ts") or None
                self.shared.append((str(channel), upload["name"], upload["data"], comment, thread))
            files.append(
                {
                    "id": item["id"],
                    "name": upload["name"],
                    "title": item.get("title") or upload["name"],
                    "size": len(upload["data"]),
                }
            )
        return {"ok": True, "files": files}

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        self._sockets.append(ws)
        await ws.send_str(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": 1,
                    "debug_info": {"host": "fake"},
                    "connection_info": {"app_id": "A1"},
                }
            )
        )
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    data = json.loads(msg.data)
                    if "envelope_id" in data:
                        self.acks.append(data["envelope_id"])
        finally:
            self._sockets.remove(ws)
        return ws
