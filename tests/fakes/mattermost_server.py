"""A local Mattermost: REST API v4 and the websocket, in its own thread.

It speaks what a Mattermost server sends, as its API reference and server source
describe it: every request needs `Authorization: Bearer <token>` (401 with the API's
error body otherwise); the websocket at /api/v4/websocket takes an
`authentication_challenge` (seq 1) and answers `{"status": "OK", "seq_reply": 1}`, then
a `hello` event; a post is broadcast as a `posted` event whose `data.post` is the post as
a JSON *string*, with `channel_type` (D, G, O, P), `sender_name` ("@name") and
`mentions` (a JSON string of user ids, only when someone was mentioned). Posts are
created with POST /posts (201; `file_ids` attach files the bot uploaded with POST /files,
multipart/form-data with `channel_id` and `files`), changed with PUT /posts/{id}/patch,
removed with DELETE /posts/{id}; GET /channels/{id}/posts?since=<ms> answers `{"order":
[...], "posts": {...}}` with the posts changed since then, newest first in `order`;
files are read with GET /files/{id}; GET /channels/{id} answers the channel (its `type`); POST
/channels/direct makes the DM channel of two users. Like the real
server, a post's interactive buttons keep their integration URL and context here: what
clients get has them stripped, and a press (`press`) is POSTed by the server to the
integration URL with the context. Faults: 429 with Retry-After on the next calls of a
path, 500s, and a dropped websocket (`drop`).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from tests.fakes.aio_thread import AioFake, AioThread
from tests.fakes.http_base import form_data

TOKEN = "b0tt0ken0000000000000000aa"
BOT = "b0t00000000000000000000000"  # the bot's user id (26 characters, as real ids)
BOT_NAME = "hermes"
TEAM = "t3am0000000000000000000000"


def _id(n: int) -> str:
    return f"p{n:025d}"


@dataclass
class Fault:
    path: str  # the request path's start, e.g. "/api/v4/posts"
    status: int = 429
    retry_after: int | None = 1
    method: str = ""  # only requests of this method (any: "")


@dataclass
class FakeMattermost(AioFake):
    posts: dict[str, dict[str, Any]] = field(default_factory=dict)  # id: the stored post
    channels: dict[str, str] = field(default_factory=dict)  # id: type (D G O P)
    files: dict[str, tuple[bytes, dict[str, Any]]] = field(default_factory=dict)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)  # (method, path, body)
    faults: deque[Fault] = field(default_factory=deque)
    typing: list[str] = field(default_factory=list)  # channel ids
    connections: int = 0
    presses: list[tuple[int, Any]] = field(default_factory=list)  # (status, answer)
    edit_times: list[float] = field(default_factory=list)
    broken_downloads: bool = False  # every file read answers 500
    downloads: int = 0
    first_actions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # post: buttons

    def __post_init__(self) -> None:
        self._sockets: list[web.WebSocketResponse] = []
        self._ids = itertools.count(1)
        self._clock = int(time.time() * 1000)
        app = web.Application(middlewares=[self._auth])
        api = "/api/v4"
        app.router.add_get(f"{api}/users/me", self._me)
        app.router.add_post(f"{api}/users/{{user}}/typing", self._typing)
        app.router.add_post(f"{api}/posts", self._create)
        app.router.add_put(f"{api}/posts/{{post}}/patch", self._patch)
        app.router.add_delete(f"{api}/posts/{{post}}", self._delete)
        app.router.add_get(f"{api}/channels/{{channel}}", self._channel)
        app.router.add_get(f"{api}/channels/{{channel}}/posts", self._since)
        app.router.add_post(f"{api}/channels/direct", self._direct)
        app.router.add_get(f"{api}/users/me/channels", self._my_channels)
        app.router.add_get(f"{api}/files/{{file}}", self._file)
        app.router.add_post(f"{api}/files", self._upload)
        app.router.add_get(f"{api}/websocket", self._socket)
        self._server = AioThread(app)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what people do ----------------------------------------------------------------------

    def say(
        self,
        user: str,
        text: str,
        *,
        channel: str = "",
        channel_type: str = "D",
        root_id: str = "",
        mentions: list[str] | None = None,
        files: Sequence[tuple[Any, ...]] = (),
        live: bool = True,
        at: int | None = None,
    ) -> str:
        """`user` posts `text` (a DM with the bot unless `channel`); the post's id. With
        `live`, the websocket's clients are told (else it is only stored: posted while no
        client listened)."""
        channel = channel or f"dm-{user}"
        self.channels[channel] = channel_type
        infos = []
        for name, mime, data, *declared in files:  # (name, mime, data[, the size said])
            file_id = f"f{next(self._ids):025d}"
            size = declared[0] if declared else len(data)
            info = {"id": file_id, "name": name, "mime_type": mime, "size": size}
            self.files[file_id] = (data, info)
            infos.append(info)
        post = self._store(user, channel, text, root_id, [i["id"] for i in infos], at)
        post["metadata"] = {"files": infos} if infos else {}
        if live:
            self._server.call(self._broadcast(post, user, mentions))
        return str(post["id"])

    def press(
        self, post_id: str, index: int, user: str, *, wait: bool = True, to: str | None = None
    ) -> tuple[int, Any] | None:
        """`user` presses the post's button `index`: the server POSTs the action's
        context to its integration URL (as Mattermost does); the gateway's status and
        answer (without `wait`: sent, and its answer kept in `presses` when it comes, for
        a caller on the gateway's own loop)."""
        post = self.posts[post_id]
        action = self.first_actions[post_id][index]
        body = {
            "user_id": user,
            "user_name": user,
            "channel_id": post["channel_id"],
            "team_id": "",
            "post_id": post_id,
            "trigger_id": f"trigger{next(self._ids)}",
            "type": "",
            "data_source": "",
            "context": action["integration"]["context"],
        }
        url = str(action["integration"]["url"])
        if to is not None:  # the balancer in front of the URL picked the instance at `to`
            url = to + urlsplit(url).path
        pushed = self._post_to(url, body)
        if not wait:
            asyncio.run_coroutine_threadsafe(pushed, self._server.loop)
            return None
        return self._server.call(pushed)

    def drop(self) -> None:
        """Close every websocket (the clients reconnect)."""
        self._server.call(self._close_all())

    def wait_connected(self, count: int = 1, timeout: float = 60) -> None:
        """Until `count` websocket connections have been authenticated in all."""
        deadline = time.monotonic() + timeout
        while self.connections < count:
            assert time.monotonic() < deadline, f"{self.connections} websocket connections"
            time.sleep(0.02)

    def redeliver(self, post_id: str) -> None:
        """The post's `posted` event again (a server that sends an event twice)."""
        post = self.posts[post_id]
        self._server.call(self._broadcast(post, str(post["user_id"]), None))

    # -- what the bot sees -------------------------------------------------------------------

    def bot_posts(self, channel: str | None = None) -> list[dict[str, Any]]:
        return [
            p
            for p in self.posts.values()
            if p["user_id"] == BOT and (channel is None or p["channel_id"] == channel)
        ]

    def texts(self, channel: str | None = None) -> list[str]:
        return [str(p["message"]) for p in self.bot_posts(channel)]

    # -- the server ------------------------------------------------------------------------

    def _store(  # noqa: PLR0917
        self,
        user: str,
        channel: str,
        text: str,
        root: str,
        file_ids: list[str],
        at: int | None = None,
    ) -> dict[str, Any]:
        """A new post (`at`: written then, in ms, instead of now)."""
        self._clock = max(self._clock + 1, int(time.time() * 1000))
        if at is not None:
            self._clock = at
        post = {
            "id": _id(next(self._ids)),
            "create_at": self._clock,
            "update_at": self._clock,
            "edit_at": 0,
            "delete_at": 0,
            "user_id": user,
            "channel_id": channel,
            "root_id": root,
            "message": text,
            "type": "",
            "props": {},
            "file_ids": file_ids,
            "metadata": {},
        }
        self.posts[str(post["id"])] = post
        return post

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.endswith("/websocket"):
            return await handler(request)  # authenticated by its challenge
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _error(
                401, "api.context.session_expired.app_error", "Invalid or expired session"
            )
        body = await request.read() if request.can_read_body else b""
        if request.content_type == "application/json":
            self.calls.append((request.method, request.path, json.loads(body) if body else None))
        else:  # an upload: its size
            self.calls.append((request.method, request.path, len(body)))
        for fault in list(self.faults):
            if request.path.startswith(fault.path) and fault.method in ("", request.method):
                self.faults.remove(fault)
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else {}
                if fault.status == 429:
                    headers |= {"X-Ratelimit-Limit": "10", "X-Ratelimit-Remaining": "0"}
                return _error(fault.status, "api.context.rate_limit", "Too many requests", headers)
        return await handler(request)

    def _keep_actions(self, post: dict[str, Any]) -> None:
        """The post's first buttons, kept after an edit removes them: a second tap sent
        before the client saw the edit still arrives (a double tap)."""
        for attachment in (post.get("props") or {}).get("attachments") or []:
            if attachment.get("actions"):
                self.first_actions.setdefault(str(post["id"]), list(attachment["actions"]))

    async def _me(self, _request: web.Request) -> web.Response:
        return web.json_response({"id": BOT, "username": BOT_NAME, "is_bot": True})

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing.append(str((await request.json())["channel_id"]))
        return web.json_response({"status": "OK"})

    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        channel = str(body.get("channel_id") or "")
        if channel not in self.channels:
            return _error(403, "api.context.permissions.app_error", "No permission")
        ids = [str(i) for i in body.get("file_ids") or [] if self._attachable(str(i), channel)]
        post = self._store(
            BOT, channel, str(body.get("message") or ""), str(body.get("root_id") or ""), ids
        )
        post["metadata"] = {"files": [self.files[i][1] for i in ids]} if ids else {}
        for file_id in ids:
            self.files[file_id][1]["post_id"] = post["id"]
        post["props"] = body.get("props") or {}
        self._keep_actions(post)
        await self._broadcast(post, BOT, None)
        return web.json_response(_for_clients(post), status=201)

    async def _patch(self, request: web.Request) -> web.Response:
        post = self.posts.get(request.match_info["post"])
        if post is None or post["delete_at"]:
            return _error(404, "app.post.get.app_error", "Unable to get the post")
        body = await request.json()
        if "message" in body:
            post["message"] = body["message"]
        if "props" in body:
            post["props"] = body["props"]
            self._keep_actions(post)
        post["edit_at"] = post["update_at"] = int(time.time() * 1000)
        self.edit_times.append(time.monotonic())
        return web.json_response(_for_clients(post))

    async def _delete(self, request: web.Request) -> web.Response:
        post = self.posts.pop(request.match_info["post"], None)
        if post is None:
            return _error(404, "app.post.get.app_error", "Unable to get the post")
        return web.json_response({"status": "OK"})

    async def _since(self, request: web.Request) -> web.Response:
        channel = request.match_info["channel"]
        if channel not in self.channels:
            return _error(403, "api.context.permissions.app_error", "No permission")
        since = int(request.query.get("since", "0"))
        changed = [
            p for p in self.posts.values() if p["channel_id"] == channel and p["update_at"] > since
        ]
        changed.sort(key=lambda p: -int(p["create_at"]))
        return web.json_response(
            {
                "order": [p["id"] for p in changed],
                "posts": {p["id"]: _for_clients(p) for p in changed},
            }
        )

    def _channel_of(self, channel: str) -> dict[str, Any]:
        """A channel as the API answers it (the fields read here)."""
        kind = self.channels[channel]
        times = [int(p["create_at"]) for p in self.posts.values() if p["channel_id"] == channel]
        return {
            "id": channel,
            "type": kind,
            "team_id": "" if kind in ("D", "G") else TEAM,
            "name": channel,
            "last_post_at": max(times, default=0),
        }

    async def _channel(self, request: web.Request) -> web.Response:
        channel = request.match_info["channel"]
        if channel not in self.channels:
            return _error(404, "app.channel.get.existing.app_error", "Unable to find channel.")
        return web.json_response(self._channel_of(channel))

    async def _my_channels(self, _request: web.Request) -> web.Response:
        """Every channel of the bot in every team, and its DMs and group DMs, each with
        the time of its last post (the whole list: the server streams every page)."""
        return web.json_response([self._channel_of(channel) for channel in self.channels])

    async def _direct(self, request: web.Request) -> web.Response:
        users = sorted(await request.json())
        channel = f"dm-{users[0] if users[1] == BOT else users[1]}"
        self.channels[channel] = "D"
        return web.json_response({"id": channel, "type": "D"}, status=201)

    def _attachable(self, file_id: str, channel: str) -> bool:
        """A file the bot uploaded to `channel` and no post carries yet (the server
        leaves out any other id a post names)."""
        found = self.files.get(file_id)
        if found is None:
            return False
        info = found[1]
        mine = info.get("user_id") == BOT and info.get("channel_id") == channel
        return mine and not info.get("post_id")

    async def _upload(self, request: web.Request) -> web.Response:
        """POST /files: multipart/form-data with `channel_id` and one or more `files`;
        201 with their `file_infos` (attached to a post by its `file_ids`)."""
        form = form_data(await request.read(), request.headers["Content-Type"])
        channel = form["channel_id"].text if "channel_id" in form else ""
        if channel not in self.channels:
            return _error(403, "api.context.permissions.app_error", "No permission")
        infos = []
        for upload in [p for k, p in form.items() if k.startswith("files")]:
            if upload.filename is None:
                return _error(400, "api.file.upload_file.bad_parse.app_error", "Not a file")
            data, name = upload.data, upload.filename
            file_id = f"f{next(self._ids):025d}"
            info = {
                "id": file_id,
                "user_id": BOT,
                "channel_id": channel,
                "post_id": "",
                "name": name,
                "extension": name.rsplit(".", 1)[-1] if "." in name else "",
                "size": len(data),
                "mime_type": upload.content_type,
                "create_at": int(time.time() * 1000),
            }
            self.files[file_id] = (data, info)
            infos.append(info)
        if not infos:
            return _error(400, "api.file.upload_file.bad_parse.app_error", "No files")
        return web.json_response({"file_infos": infos, "client_ids": []}, status=201)

    def sent_files(self, channel: str = "") -> list[tuple[str, str, bytes, str]]:
        """The files the bot posted (in `channel`): name, MIME type, bytes, the post's text."""
        found = []
        for post in self.posts.values():
            if post["user_id"] == BOT and (not channel or post["channel_id"] == channel):
                for file_id in post["file_ids"]:
                    data, info = self.files[file_id]
                    found.append((str(info["name"]), str(info["mime_type"]), data, post["message"]))
        return found

    async def _file(self, request: web.Request) -> web.Response:
        self.downloads += 1
        found = self.files.get(request.match_info["file"])
        if self.broken_downloads:
            return _error(500, "app.file.read.app_error", "Unable to read the file")
        if found is None:
            return _error(404, "app.file.get.app_error", "Unable to get the file")
        data, info = found
        return web.Response(body=data, content_type=str(info["mime_type"]))

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        first = await socket.receive_json(timeout=10)
        if (
            first.get("action") != "authentication_challenge"
            or first.get("data", {}).get("token") != TOKEN
        ):
            error = {
                "id": "api.web_socket_router.not_authenticated.app_error",
                "message": "bad token",
            }
            await socket.send_json(
                {"status": "FAIL", "seq_reply": first.get("seq"), "error": error}
            )
            await socket.close()
            return socket
        await socket.send_json({"status": "OK", "seq_reply": first.get("seq")})
        await socket.send_json(
            {"event": "hello", "data": {"server_version": "9.11.0"}, "broadcast": {}, "seq": 0}
        )
        self.connections += 1
        self._sockets.append(socket)
        try:
            async for _frame in socket:
                pass
        finally:
            if socket in self._sockets:
                self._sockets.remove(socket)
        return socket

    async def _broadcast(self, post: dict[str, Any], user: str, mentions: list[str] | None) -> None:
        channel_type = self.channels.get(str(post["channel_id"]), "O")
        data: dict[str, Any] = {
            "channel_display_name": "",
            "channel_name": str(post["channel_id"]),
            "channel_type": channel_type,
            "post": json.dumps(_for_clients(post)),
            "sender_name": f"@{BOT_NAME if user == BOT else user}",
            "set_online": True,
            "team_id": "",
        }
        if mentions:
            data["mentions"] = json.dumps(mentions)
        event = {
            "event": "posted",
            "data": data,
            "broadcast": {
                "omit_users": None,
                "user_id": "",
                "channel_id": post["channel_id"],
                "team_id": "",
            },
            "seq": 1,
        }
        for socket in list(self._sockets):
            await socket.send_json(event)

    async def _close_all(self) -> None:
        for socket in list(self._sockets):
            await socket.close()
        self._sockets.clear()
        await asyncio.sleep(0)

    async def _post_to(self, url: str, body: dict[str, Any]) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
            text = await response.text()
            result = response.status, json.loads(text) if text else None
        self.presses.append(result)
        return result


def _for_clients(post: dict[str, Any]) -> dict[str, Any]:
    """The post as clients get it: buttons without their integration (the server keeps
    the URL and the context to itself)."""
    shown = copy.deepcopy(post)
    for attachment in (shown.get("props") or {}).get("attachments") or []:
        for action in attachment.get("actions") or []:
            action.pop("integration", None)
    return shown


def _error(
    status: int, error_id: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = {
        "id": error_id,
        "message": message,
        "detailed_error": "",
        "request_id": "r",
        "status_code": status,
    }
    return web.json_response(body, status=status, headers=headers)
