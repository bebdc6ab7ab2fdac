"""A local Discord: REST API and gateway websocket, in its own thread, for discord.py.

REST: GET /users/@me, /oauth2/applications/@me, /gateway(/bot); POST
/channels/{id}/messages (recorded; with files: multipart, `payload_json` and `files[n]`,
the bytes kept under each of the record's `files`), PATCH and DELETE
/channels/{id}/messages/{id} (on the bot's messages; `messages` holds what each shows
now), /channels/{id}/typing; GET
/channels/{id}/messages, a channel's history (people's messages and the bot's) with
`limit` (1-100, 50 by default), `after` (the messages right after it) or `before`, newest
first as Discord answers, message objects without `guild_id` as the REST API gives them.
A message sent with `live=False` goes to the history only (sent while the bot was not
connected: a new gateway session does not replay it).
Gateway: HELLO, heartbeat ACK, IDENTIFY -> READY (+ GUILD_CREATE), RESUME -> RESUMED,
MESSAGE_CREATE pushed by tests. Like the real gateway, guild message content is blanked
unless the message_content intent was identified (or the bot is mentioned). Faults: 429 on a
route, dropped websocket (the client resumes).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.aio_thread import AioFake, AioThread
from tests.fakes.http_base import FormPart, form_data

BOT_ID = "900000000000000001"
APP_ID = "900000000000000002"
GUILD_ID = "800000000000000001"
GUILD_CHANNEL = "800000000000000010"
MESSAGE_CONTENT_INTENT = 1 << 15


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """discord.py parses a body as JSON only for exactly `application/json` (no charset)."""
    return web.Response(
        body=json.dumps(payload).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


@dataclass
class DiscordFault:
    path_suffix: str
    status: int = 429
    retry_after: float = 1.0
    method: str | None = None  # only requests of this HTTP method (None: any)


@dataclass
class FakeDiscord(AioFake):
    posted: list[dict[str, Any]] = field(default_factory=list)
    typing: list[str] = field(default_factory=list)
    faults: deque[DiscordFault] = field(default_factory=deque)
    identifies: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    interaction_replies: list[dict[str, Any]] = field(default_factory=list)
    resumes: int = 0
    messages: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, id): text
    edits: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[tuple[str, float]] = field(default_factory=list)  # ("PATCH /x", monotonic)
    files: dict[str, bytes] = field(default_factory=dict)  # CDN path: data
    downloads: list[str] = field(default_factory=list)
    broken_downloads: set[str] = field(default_factory=set)  # paths that answer 500
    broken_names: set[str] = field(default_factory=set)  # file names that do (any id)
    sync_delay: float = 0.0  # how long a command sync (PUT .../commands) takes to answer
    history: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # channel: oldest first
    gone_channels: set[str] = field(default_factory=set)  # answered 404 Unknown Channel

    def __post_init__(self) -> None:
        self.sync_started = threading.Event()
        self._sockets: list[web.WebSocketResponse] = []
        self._seq = itertools.count(1)
        self._last_id = 0
        app = web.Application()
        app.router.add_route("*", "/api/v10/{tail:.*}", self._rest)
        app.router.add_get("/gateway", self._socket)
        app.router.add_get("/attachments/{tail:.*}", self._cdn)
        self._server = AioThread(app)

    def _snowflake(self) -> str:
        """A new id as Discord makes them: the milliseconds since its epoch (2015) in the
        high bits, so a message's id says when it was sent."""
        now = (int(time.time() * 1000) - 1_420_070_400_000) << 22
        self._last_id = max(self._last_id + 1, now)
        return str(self._last_id)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    # -- what users do ---------------------------------------------------------------------

    def message(
        self,
        text: str,
        *,
        user: str = "700000000000000001",
        guild: bool = False,
        mention: bool = False,
        channel: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
        live: bool = True,
    ) -> dict[str, Any]:
        """A person's message: in the channel's history, and pushed to the connected
        gateway session (`live`), as Discord does."""
        message_id = self._snowflake()
        data: dict[str, Any] = {
            "id": message_id,
            "channel_id": channel or (GUILD_CHANNEL if guild else f"6{user[1:]}"),
            "author": {
                "id": user,
                "username": f"user{user[-2:]}",
                "discriminator": "0",
                "global_name": None,
                "avatar": None,
                "bot": False,
            },
            "content": text,
            "timestamp": "2026-11-29T10:00:00.000000+00:00",
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "attachments": attachments or [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "mentions": [],
            "mention_roles": [],
        }
        if mention:
            data["mentions"] = [
                {
                    "id": BOT_ID,
                    "username": "hermes",
                    "discriminator": "0",
                    "bot": True,
                    "avatar": None,
                    "global_name": None,
                }
            ]
        if guild:
            data["guild_id"] = GUILD_ID
            data["member"] = {
                "roles": [],
                "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "flags": 0,
            }
        rest = {k: v for k, v in data.items() if k not in ("guild_id", "member")}
        self.history.setdefault(data["channel_id"], []).append(rest)
        if live:
            self.dispatch("MESSAGE_CREATE", data)
        return data

    def slash(self, name: str, user: str = "700000000000000001", text: str | None = None) -> None:
        data: dict[str, Any] = {"id": "1", "name": name, "type": 1}
        if text is not None:
            data["options"] = [{"name": "text", "type": 3, "value": text}]
        interaction_id = self._snowflake()
        self.dispatch(
            "INTERACTION_CREATE",
            {
                "id": interaction_id,
                "application_id": APP_ID,
                "type": 2,
                "token": f"tok{interaction_id}",
                "version": 1,
                "data": data,
                "channel_id": f"6{user[1:]}",
                "channel": {"id": f"6{user[1:]}", "type": 1},
                "user": {
                    "id": user,
                    "username": "ann",
                    "discriminator": "0",
                    "avatar": None,
                    "global_name": "Ann",
                    "bot": False,
                },
                "locale": "en-US",
                "app_permissions": "0",
                "entitlements": [],
                "authorizing_integration_owners": {"1": user},
                "context": 1,
                "attachment_size_limit": 8388608,
            },
        )

    def press(
        self, channel: str, message_id: str, custom_id: str, user: str = "700000000000000001"
    ) -> str:
        """A press of a button under the bot's message (a component interaction)."""
        interaction_id = self._snowflake()
        message = {
            **self._bot_message(channel, self.messages.get((channel, message_id), "")),
            "id": message_id,
            "components": [],
        }
        self.dispatch(
            "INTERACTION_CREATE",
            {
                "id": interaction_id,
                "application_id": APP_ID,
                "type": 3,
                "token": f"tok{interaction_id}",
                "version": 1,
                "data": {"custom_id": custom_id, "component_type": 2},
                "channel_id": channel,
                "channel": {"id": channel, "type": 1},
                "message": message,
                "user": {
                    "id": user,
                    "username": f"user{user[-2:]}",
                    "discriminator": "0",
                    "avatar": None,
                    "global_name": None,
                    "bot": False,
                },
                "locale": "en-US",
                "app_permissions": "0",
                "entitlements": [],
                "authorizing_integration_owners": {"1": user},
                "context": 1,
                "attachment_size_limit": 8388608,
            },
        )
        return interaction_id

    def add_attachment(
        self, data: bytes, name: str, content_type: str, *, size: int | None = None, **extra: Any
    ) -> dict[str, Any]:
        """A file users can attach: its object for a message's `attachments`."""
        attachment_id = self._snowflake()
        path = f"{attachment_id}/{name}"
        self.files[path] = data
        return {
            "id": attachment_id,
            "filename": name,
            "size": len(data) if size is None else size,
            "url": f"http://127.0.0.1:{self.port}/attachments/{path}",
            "proxy_url": f"http://127.0.0.1:{self.port}/attachments/{path}",
            "content_type": content_type,
            **extra,
        }

    async def _cdn(self, request: web.Request) -> web.Response:
        path = request.match_info["tail"]
        self.downloads.append(path)
        if path in self.broken_downloads or path.rsplit("/", 1)[-1] in self.broken_names:
            return web.Response(status=500, text="broken")
        if path not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[path], content_type="application/octet-stream")

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        self._server.call(self._dispatch(event, data))

    def drop_connections(self, code: int = 4000) -> None:
        """Close every gateway socket: 4000 lets the client resume; 4004 (authentication
        failed) and 4014 (disallowed intents) make discord.py give up."""

        async def close_all() -> None:
            for ws in list(self._sockets):
                await ws.close(code=code)

        self._server.call(close_all())

    def wait_ready(self, count: int = 1, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while len(self.identifies) + self.resumes < count or not self._sockets:
            assert time.monotonic() < deadline, "discord.py never identified"
            time.sleep(0.05)

    # -- server side -----------------------------------------------------------------------

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        deadline = time.monotonic() + 10
        while not self._sockets and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for ws in list(self._sockets):
            if event == "MESSAGE_CREATE" and not self._may_read(data):
                data = {**data, "content": ""}
            await ws.send_str(json.dumps({"op": 0, "t": event, "s": next(self._seq), "d": data}))

    def _may_read(self, data: dict[str, Any]) -> bool:
        if "guild_id" not in data:
            return True
        intents = int(self.identifies[-1].get("intents", 0)) if self.identifies else 0
        mentioned = any(m.get("id") == BOT_ID for m in data.get("mentions", []))
        return bool(intents & MESSAGE_CONTENT_INTENT) or mentioned

    async def _rest(self, request: web.Request) -> web.Response:  # noqa: PLR0911, PLR0912 - a route table
        tail = "/" + request.match_info["tail"]
        body = await request.read()
        self.timeline.append((f"{request.method} {tail}", time.monotonic()))
        fault = next(
            (
                f
                for f in self.faults
                if tail.endswith(f.path_suffix) and f.method in (None, request.method)
            ),
            None,
        )
        if fault:
            self.faults.remove(fault)
            payload = {
                "message": "You are being rate limited.",
                "retry_after": fault.retry_after,
                "global": False,
            }
            return _json(
                payload,
                status=fault.status,
                headers={"Retry-After": str(fault.retry_after), "Via": "1.1 google"},
            )
        if tail == "/users/@me":
            return _json(
                {
                    "id": BOT_ID,
                    "username": "hermes",
                    "discriminator": "0",
                    "global_name": None,
                    "avatar": None,
                    "bot": True,
                    "flags": 0,
                }
            )
        if tail == "/oauth2/applications/@me":
            return _json(
                {
                    "id": APP_ID,
                    "name": "Hermes",
                    "icon": None,
                    "description": "",
                    "bot_public": True,
                    "bot_require_code_grant": False,
                    "verify_key": "00",
                    "flags": 0,
                    "owner": {"id": "1", "username": "o", "discriminator": "0", "avatar": None},
                }
            )
        if tail.startswith("/gateway"):
            return _json(
                {
                    "url": self.gateway_url,
                    "shards": 1,
                    "session_start_limit": {
                        "total": 1000,
                        "remaining": 1000,
                        "reset_after": 0,
                        "max_concurrency": 1,
                    },
                }
            )
        if tail == "/users/@me/channels" and request.method == "POST":
            recipient = str(json.loads(body or b"{}").get("recipient_id"))
            user = {
                "id": recipient,
                "username": f"user{recipient[-2:]}",
                "discriminator": "0",
                "avatar": None,
                "global_name": None,
            }
            return _json({"id": f"6{recipient[1:]}", "type": 1, "recipients": [user]})
        if tail.startswith("/users/") and request.method == "GET":
            user_id = tail.split("/")[2]
            return _json(
                {
                    "id": user_id,
                    "username": f"user{user_id[-2:]}",
                    "discriminator": "0",
                    "avatar": None,
                    "global_name": None,
                }
            )
        if tail.endswith("/typing"):
            self.typing.append(tail.split("/")[2])
            return web.Response(status=204)
        if tail.endswith("/commands") and request.method == "PUT":
            self.sync_started.set()
            await asyncio.sleep(self.sync_delay)
            self.commands = json.loads(body or b"[]")
            return _json(
                [
                    {
                        **c,
                        "id": self._snowflake(),
                        "application_id": APP_ID,
                        "version": "1",
                        "type": 1,
                        "default_member_permissions": None,
                        "dm_permission": True,
                        "nsfw": False,
                        "options": c.get("options", []),
                    }
                    for c in self.commands
                ]
            )
        if tail.endswith("/callback") and request.method == "POST":
            reply = json.loads(body or b"{}")
            self.interaction_replies.append(reply)
            interaction_id = tail.split("/")[2]
            message = {
                **self._bot_message("0", reply.get("data", {}).get("content", "")),
                "flags": 64,
                "type": 20,
            }
            return _json(
                {
                    "interaction": {
                        "id": interaction_id,
                        "type": 2,
                        "response_message_id": message["id"],
                        "response_message_loading": False,
                        "response_message_ephemeral": True,
                    },
                    "resource": {"type": 4, "message": message},
                }
            )
        if tail.endswith("/messages") and request.method == "GET":
            return self._history(tail.split("/")[2], request.query)
        if tail.endswith("/messages") and request.method == "POST":
            uploads: list[dict[str, Any]] = []
            if request.content_type == "multipart/form-data":  # files: payload_json + files[n]
                form = form_data(body, request.headers["Content-Type"])
                payload = json.loads(form.pop("payload_json").data)
                uploads = [self._attachment(part) for part in form.values()]
            else:
                payload = json.loads(body or b"{}")
            channel_id = tail.split("/")[2]
            message = self._bot_message(channel_id, payload.get("content") or "")
            message["attachments"] = [{k: v for k, v in a.items() if k != "data"} for a in uploads]
            payload["files"] = uploads
            self.posted.append({"channel_id": channel_id, "message_id": message["id"], **payload})
            self.messages[(channel_id, message["id"])] = message["content"]
            self.history.setdefault(channel_id, []).append(message)
            return _json(message)
        parts = tail.split("/")
        if len(parts) == 5 and parts[3] == "messages" and request.method in ("PATCH", "DELETE"):
            key = (parts[2], parts[4])
            if key not in self.messages:
                return _json({"message": "Unknown Message", "code": 10008}, status=404)
            if request.method == "DELETE":
                del self.messages[key]
                return web.Response(status=204)
            payload = json.loads(body or b"{}")
            self.edits.append({"channel_id": key[0], "id": key[1], **payload})
            self.messages[key] = payload.get("content", "")
            return _json({**self._bot_message(key[0], self.messages[key]), "id": key[1]})
        return _json({})

    def _history(self, channel_id: str, query: Any) -> web.Response:
        """GET /channels/{id}/messages: up to `limit` messages right after `after`, or
        right before `before`, or the latest; newest first."""
        if channel_id in self.gone_channels:
            return _json({"message": "Unknown Channel", "code": 10003}, status=404)
        limit = int(query.get("limit", 50))
        if not 1 <= limit <= 100:
            return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        kept = self.history.get(channel_id, [])
        if "after" in query:
            page = [m for m in kept if int(m["id"]) > int(query["after"])][:limit]
        elif "before" in query:
            page = [m for m in kept if int(m["id"]) < int(query["before"])][-limit:]
        else:
            page = kept[-limit:]
        return _json(list(reversed(page)))

    def _attachment(self, part: FormPart) -> dict[str, Any]:
        """An uploaded file as the message's attachment object (its bytes under "data",
        for the tests: the API does not answer with them)."""
        attachment_id = self._snowflake()
        url = f"http://127.0.0.1:{self.port}/attachments/{attachment_id}/{part.filename}"
        return {
            "id": attachment_id,
            "filename": part.filename,
            "size": len(part.data),
            "url": url,
            "proxy_url": url,
            "content_type": part.content_type,
            "data": part.data,
        }

    def _bot_message(self, channel_id: str, content: str) -> dict[str, Any]:
        return {
            "id": self._snowflake(),
            "channel_id": channel_id,
            "content": content,
            "author": {
                "id": BOT_ID,
                "username": "hermes",
                "discriminator": "0",
                "avatar": None,
                "bot": True,
                "global_name": None,
            },
            "timestamp": "2026-11-29T10:00:01.000000+00:00",
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
        }

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(
            json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None})
        )
        self._sockets.append(ws)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                await self._on_frame(ws, frame)
        finally:
            self._sockets.remove(ws)
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        if op == 1:
            await ws.send_str(json.dumps({"op": 11, "d": None, "s": None, "t": None}))
        elif op == 2:
            self.identifies.append(frame["d"])
            ready = {
                "v": 10,
                "user": {
                    "id": BOT_ID,
                    "username": "hermes",
                    "discriminator": "0",
                    "bot": True,
                    "avatar": None,
                    "global_name": None,
                    "flags": 0,
                },
                "guilds": [{"id": GUILD_ID, "unavailable": True}],
                "session_id": "sess-1",
                "resume_gateway_url": self.gateway_url,
                "application": {"id": APP_ID, "flags": 0},
                "private_channels": [],
                "relationships": [],
                "user_settings": {},
                "presences": [],
            }
            await ws.send_str(json.dumps({"op": 0, "t": "READY", "s": next(self._seq), "d": ready}))
            guild = {
                "id": GUILD_ID,
                "name": "Test Guild",
                "unavailable": False,
                "member_count": 2,
                "roles": [
                    {
                        "id": GUILD_ID,
                        "name": "@everyone",
                        "permissions": "2048",
                        "position": 0,
                        "color": 0,
                        "hoist": False,
                        "managed": False,
                        "mentionable": False,
                    }
                ],
                "channels": [
                    {
                        "id": GUILD_CHANNEL,
                        "type": 0,
                        "name": "general",
                        "position": 0,
                        "permission_overwrites": [],
                        "guild_id": GUILD_ID,
                    }
                ],
                "members": [],
                "threads": [],
                "presences": [],
                "voice_states": [],
                "emojis": [],
                "stickers": [],
                "features": [],
                "owner_id": "1",
                "afk_timeout": 300,
                "verification_level": 0,
                "default_message_notifications": 0,
                "explicit_content_filter": 0,
                "mfa_level": 0,
                "premium_tier": 0,
                "nsfw_level": 0,
                "preferred_locale": "en-US",
                "large": False,
                "joined_at": "2026-01-01T00:00:00+00:00",
            }
            await ws.send_str(
                json.dumps({"op": 0, "t": "GUILD_CREATE", "s": next(self._seq), "d": guild})
            )
        elif op == 6:
            self.resumes += 1
            await ws.send_str(json.dumps({"op": 0, "t": "RESUMED", "s": next(self._seq), "d": {}}))
