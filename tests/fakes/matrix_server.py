"""A local Matrix homeserver: the client-server API a bot uses, in its own thread.

It speaks what a homeserver sends, as the Matrix specification (v1.11) describes it and
as `matrix-nio` parses it: every request needs `Authorization: Bearer <token>` (401
`M_MISSING_TOKEN` / `M_UNKNOWN_TOKEN` otherwise); `/sync` long-polls (`timeout` ms)
from a `since` token and answers `next_batch`, the joined rooms' new timeline events
(a room joined since then: its state and its latest events, `limited` with a
`prev_batch` when there are more than the filter's `timeline.limit`), invites with their
stripped `invite_state`, and left rooms; events are sent with PUT
`/rooms/{id}/send/{type}/{txnId}` (the same transaction id gives the same event: a
retried request posts once), redacted with PUT `/rooms/{id}/redact/{event}/{txnId}`;
`/rooms/{id}/context/{event}` and `/rooms/{id}/messages` paginate with `from` / `dir` /
`limit` (`end` omitted past the last event); media is uploaded with POST
`/_matrix/media/v3/upload` (at most `m.upload.size` of GET
`/_matrix/client/v1/media/config`) and read with GET
`/_matrix/client/v1/media/download/{server}/{id}` (authenticated media). Errors carry
`errcode` and `error`; a 429 `M_LIMIT_EXCEEDED` has `retry_after_ms` and a `Retry-After`
header.

People act through the test's methods (`say`, `react`, `invite`), which put their events
in the stream as another client's requests would. Faults: 429s and 5xx on the next
calls of a path, and a homeserver that goes away (`drop`: the open syncs and the next
ones answer 502, as a reverse proxy does while the server restarts).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.aio_thread import AioFake, AioThread

SERVER = "hermes.test"
BOT = f"@hermes:{SERVER}"
BOT_NAME = "Hermes Assistant"  # the bot's display name
TOKEN = "syt_aGVybWVz_fakeBotToken_0a1b2c"
DEVICE = "HERMESBOT"
BUTTONS = "org.hermes.buttons"  # where the adapter keeps a message's buttons (its content)
CLIENT = "/_matrix/client/v3"
ME = web.RequestKey("me", str)  # who a request's token is
DEVICE_KEY = web.RequestKey("device", str)  # and on which device
MEDIA = "/_matrix/client/v1/media"
UPLOAD = "/_matrix/media/v3/upload"  # uploads stay on the media API (spec v1.11)


def user(name: str) -> str:
    return f"@{name}:{SERVER}"


@dataclass
class Fault:
    path: str  # a part of the request path, e.g. "/send/m.room.message"
    status: int = 429  # 0: the connection drops
    retry_after_ms: int | None = 1000
    method: str = ""  # only requests of this method (any: "")
    edits: bool | None = None  # only edits (True), only new messages (False), any (None)

    def matches(self, method: str, path: str, body: Any) -> bool:
        if self.path not in path or self.method not in ("", method):
            return False
        if self.edits is None:
            return True
        relates = (body or {}).get("m.relates_to") or {} if isinstance(body, dict) else {}
        return (relates.get("rel_type") == "m.replace") == self.edits


@dataclass
class Room:
    members: dict[str, str] = field(default_factory=dict)  # user: join / invite / leave
    direct: bool = False
    changed: dict[str, int] = field(default_factory=dict)  # user: stream position of it
    inviter: str = ""


@dataclass
class FakeMatrix(AioFake):
    stream: list[dict[str, Any]] = field(default_factory=list)  # position - 1: the event
    rooms: dict[str, Room] = field(default_factory=dict)
    media: dict[str, tuple[bytes, str]] = field(default_factory=dict)  # id: (data, mime)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)  # (method, path, body)
    faults: deque[Fault] = field(default_factory=deque)
    typing: list[str] = field(default_factory=list)  # room ids
    syncs: int = 0  # sync requests answered with 200
    edit_times: list[float] = field(default_factory=list)
    broken_downloads: bool = False
    downloads: int = 0
    down: int = 0  # the next syncs that answer 502
    max_upload: int = 50 * 1024 * 1024  # bytes: larger uploads answer 413 M_TOO_LARGE
    paused: bool = False  # syncs wait (unanswered) while it is set

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)
        self._txns: dict[str, str] = {}  # transaction id: event id
        self._events: dict[str, dict[str, Any]] = {}  # event id: the event
        self._clock = int(time.time() * 1000)
        self._changed: asyncio.Condition | None = None
        self._epoch = 0  # bumped by drop(): the open syncs fail
        self._stopping = False
        self.tokens: dict[str, tuple[str, str]] = {TOKEN: (BOT, DEVICE)}  # token: (user, device)
        self.device_keys: dict[str, dict[str, Any]] = {}  # user: {device: signed keys}
        self._one_time: dict[tuple[str, str], dict[str, Any]] = {}  # (user, device): keys
        self._to_device: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._lists_changed: dict[str, set[str]] = {}  # user: whose devices changed
        self._device_stream = 0  # bumped by every to-device message and key upload
        app = web.Application(middlewares=[self._auth])
        r = app.router
        r.add_get(f"{CLIENT}/account/whoami", self._whoami)
        r.add_get(f"{CLIENT}/sync", self._sync)
        r.add_put(f"{CLIENT}/rooms/{{room}}/send/{{type}}/{{txn}}", self._send)
        r.add_put(f"{CLIENT}/rooms/{{room}}/redact/{{event}}/{{txn}}", self._redact)
        r.add_put(f"{CLIENT}/rooms/{{room}}/typing/{{user}}", self._typing)
        r.add_post(f"{CLIENT}/join/{{room}}", self._join)
        r.add_post(f"{CLIENT}/rooms/{{room}}/join", self._join)
        r.add_post(f"{CLIENT}/rooms/{{room}}/leave", self._leave)
        r.add_get(f"{CLIENT}/rooms/{{room}}/context/{{event}}", self._context)
        r.add_get(f"{CLIENT}/rooms/{{room}}/messages", self._messages)
        r.add_get(f"{CLIENT}/rooms/{{room}}/event/{{event}}", self._event)
        r.add_post(f"{CLIENT}/createRoom", self._create_room)
        r.add_get(f"{CLIENT}/profile/{{user}}/displayname", self._displayname)
        r.add_get(f"{CLIENT}/rooms/{{room}}/joined_members", self._joined_members)
        r.add_post(f"{CLIENT}/keys/upload", self._keys_upload)
        r.add_post(f"{CLIENT}/keys/query", self._keys_query)
        r.add_post(f"{CLIENT}/keys/claim", self._keys_claim)
        r.add_put(f"{CLIENT}/sendToDevice/{{type}}/{{txn}}", self._send_to_device)
        r.add_get(f"{MEDIA}/download/{{server}}/{{media}}", self._download)
        r.add_post(UPLOAD, self._upload)
        r.add_get(f"{MEDIA}/config", self._media_config)
        r.add_get(f"{MEDIA}/download/{{server}}/{{media}}/{{name}}", self._download)
        self._server = AioThread(app)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._stopping = True  # every sync from now on fails at once
        self._server.call(self._wake(epoch=True))  # the open long polls end now
        super().stop()

    # -- what people do ----------------------------------------------------------------------

    def client(self, person: str, device: str) -> str:
        """An access token for `person`'s client on `device` (a person's own client,
        matrix-nio in the tests, e.g. to write encrypted messages)."""
        token = f"syt_{person[1:].split(':', maxsplit=1)[0]}_{device}"
        self.tokens[token] = (person, device)
        return token

    def encrypt(self, room_id: str) -> None:
        """Turn end-to-end encryption on in the room (its m.room.encryption state)."""
        content = {"algorithm": "m.megolm.v1.aes-sha2"}
        creator = self.rooms[room_id].inviter
        self._server.call(
            self._append(room_id, creator, "m.room.encryption", content, state_key="")
        )

    def dm(self, person: str, *, make: bool = True) -> str:
        """The direct room of `person` and the bot: the first room of those two alone
        (the one the bot opened, if it did), else a new one with both joined (with
        `make`; else only its id, made by the person's first message)."""
        for room_id, room in self.rooms.items():
            present = {p for p, m in room.members.items() if m in ("join", "invite")}
            if present == {person, BOT}:
                return room_id
        room_id = f"!dm-{person[1:].split(':', maxsplit=1)[0]}:{SERVER}"
        if make and room_id not in self.rooms:
            self._server.call(self._make_room(room_id, person, direct=True, bot="join"))
        return room_id

    def room(self, room_id: str, *people: str) -> str:
        """A group room with `people` and the bot, all joined."""
        self._server.call(self._make_room(room_id, *people, direct=False, bot="join"))
        return room_id

    def invite(self, person: str, *, direct: bool = True, room_id: str = "") -> str:
        """`person` makes a room and invites the bot (a DM unless `direct` is False)."""
        room_id = room_id or f"!inv{next(self._ids)}:{SERVER}"
        self._server.call(self._make_room(room_id, person, direct=direct, bot="invite"))
        return room_id

    def say(
        self,
        person: str,
        text: str,
        *,
        room: str = "",
        mentions: Sequence[str] | None = None,
        thread: str = "",
        reply_to: str = "",
        file: tuple[Any, ...] | None = None,
        at: int | None = None,
    ) -> str:
        """`person` writes `text` (in their DM with the bot unless `room`); the event id.
        `file` is (name, mime, data[, declared size[, duration ms[, voice]]]): an
        m.image / m.audio / m.video / m.file message whose body is `text` or the name."""
        room = room or self.dm(person)
        content: dict[str, Any] = {"msgtype": "m.text", "body": text}
        if file is not None:
            name, mime, data, *more = file
            media_id = f"m{next(self._ids):08d}"
            self.media[media_id] = (data, mime)
            info: dict[str, Any] = {"mimetype": mime, "size": more[0] if more else len(data)}
            if len(more) > 1 and more[1] is not None:
                info["duration"] = more[1]
            kind = mime.split("/")[0]
            msgtype = {"image": "m.image", "audio": "m.audio", "video": "m.video"}
            content = {
                "msgtype": msgtype.get(kind, "m.file"),
                "body": text or name,
                "filename": name,
                "url": f"mxc://{SERVER}/{media_id}",
                "info": info,
            }
            if len(more) > 2 and more[2]:
                content["org.matrix.msc3245.voice"] = {}
        if mentions is not None:
            content["m.mentions"] = {"user_ids": list(mentions)}
        relates: dict[str, Any] = {}
        if thread:
            relates = {"rel_type": "m.thread", "event_id": thread, "is_falling_back": True}
        if reply_to:
            relates["m.in_reply_to"] = {"event_id": reply_to}
        if relates:
            content["m.relates_to"] = relates
        return self._server.call(self._append(room, person, "m.room.message", content, at=at))

    def react(self, person: str, room: str, event_id: str, key: str) -> str:
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return self._server.call(self._append(room, person, "m.reaction", content))

    def say_encrypted(self, person: str, room: str) -> str:
        """A message from a client that encrypts (its content only ciphertext)."""
        content = {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEp", "session_id": "s"}
        return self._server.call(self._append(room, person, "m.room.encrypted", content))

    def redeliver(self, event_id: str) -> None:
        """The event once more in the stream (a homeserver that sends an event twice)."""
        self._server.call(self._again(self._events[event_id]))

    def drop(self) -> None:
        """The homeserver goes away for a moment: open syncs and the next two fail (502)."""
        self.down = 2
        self._server.call(self._wake(epoch=True))

    def wait_synced(self, count: int = 1, timeout: float = 60) -> None:
        """Until `count` syncs have been answered in all."""
        deadline = time.monotonic() + timeout
        while self.syncs < count:
            assert time.monotonic() < deadline, f"{self.syncs} syncs answered"
            time.sleep(0.02)

    # -- what the bot did --------------------------------------------------------------------

    def sent(self, room: str | None = None) -> list[dict[str, Any]]:
        """The bot's messages, edits included, as sent (in order)."""
        return [
            e
            for e in self.stream
            if e["sender"] == BOT
            and e["type"] == "m.room.message"
            and (room is None or e["room_id"] == room)
        ]

    def shown(self, room: str | None = None) -> list[dict[str, Any]]:
        """The bot's messages as a client shows them now: each one's latest edit applied
        (its `m.new_content`), the redacted ones gone; oldest first."""
        now: dict[str, dict[str, Any]] = {}
        for event in self.sent(room):
            relates = event["content"].get("m.relates_to") or {}
            if relates.get("rel_type") == "m.replace":
                target = now.get(str(relates.get("event_id")))
                if target is not None:
                    target["content"] = event["content"].get("m.new_content") or {}
            elif not event.get("redacted"):
                now[event["event_id"]] = {**event, "content": dict(event["content"])}
        return [e for e in now.values() if not self._events[e["event_id"]].get("redacted")]

    def event(self, event_id: str) -> dict[str, Any]:
        """An event as it was sent (its edits not applied)."""
        return self._events[event_id]

    def text_of(self, event_id: str) -> str:
        for event in self.shown():
            if event["event_id"] == event_id:
                return str(event["content"].get("body") or "")
        return ""

    # -- the server ------------------------------------------------------------------------

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def _wake(self, *, epoch: bool = False) -> None:
        if epoch:
            self._epoch += 1
        async with self._condition():
            self._condition().notify_all()

    async def _again(self, event: dict[str, Any]) -> None:
        self.stream.append(event)
        await self._wake()

    async def _append(
        self,
        room_id: str,
        sender: str,
        kind: str,
        content: dict[str, Any],
        *,
        state_key: Any = None,
        redacts: str = "",
        at: int | None = None,
    ) -> str:
        room = self.rooms.get(room_id)
        if room is not None and sender != BOT and room.members.get(sender) != "join":
            room.members[sender] = "join"  # a person who writes in a room has joined it
        self._clock = max(self._clock + 1, int(time.time() * 1000))
        event: dict[str, Any] = {
            "type": kind,
            "event_id": f"${next(self._ids):012d}{kind.replace('.', '')[:8]}",
            "sender": sender,
            "origin_server_ts": self._clock if at is None else at,  # at: written then (ms)
            "content": content,
            "room_id": room_id,
            "unsigned": {},
        }
        if state_key is not None:
            event["state_key"] = state_key
        if redacts:  # room version 10: at the top (from 11 in the content as well)
            event["redacts"] = redacts
        self._events[event["event_id"]] = event
        await self._again(event)
        return str(event["event_id"])

    async def _member(self, room_id: str, person: str, membership: str, by: str = "") -> None:
        room = self.rooms[room_id]
        room.members[person] = membership
        content: dict[str, Any] = {"membership": membership, "displayname": person[1:]}
        if membership == "invite" and room.direct:
            content["is_direct"] = True
        await self._append(room_id, by or person, "m.room.member", content, state_key=person)
        room.changed[person] = len(self.stream)

    async def _make_room(self, room_id: str, *people: str, direct: bool, bot: str) -> None:
        self.rooms[room_id] = Room(direct=direct, inviter=people[0])
        creator = people[0]
        await self._append(room_id, creator, "m.room.create", {"room_version": "10"}, state_key="")
        for person in people:
            await self._member(room_id, person, "join")
        await self._member(room_id, BOT, bot, by=creator if bot == "invite" else "")

    @web.middleware
    async def _auth(  # noqa: PLR0911 - one answer per way a request is refused
        self, request: web.Request, handler: Any
    ) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")
        if not given:
            return _error(401, "M_MISSING_TOKEN", "Missing access token")
        who = self.tokens.get(given.removeprefix("Bearer "))
        if who is None:
            return _error(401, "M_UNKNOWN_TOKEN", "Invalid access token passed.")
        request[ME], request[DEVICE_KEY] = who
        if request.path == UPLOAD:  # a file's bytes: recorded by their size
            parsed: Any = {"size": request.content_length}
        else:
            body = await request.text() if request.can_read_body else ""
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                return _error(400, "M_NOT_JSON", "Content not JSON.")
        self.calls.append((request.method, request.path, parsed))
        for fault in list(self.faults):
            if fault.matches(request.method, request.path, parsed):
                self.faults.remove(fault)
                if fault.status == 0:  # the connection drops before any answer
                    if request.transport is not None:
                        request.transport.abort()
                    return web.Response(status=500)
                if fault.status == 429:
                    wait = fault.retry_after_ms or 1000
                    headers = {"Retry-After": str(math.ceil(wait / 1000))}
                    return _error(429, "M_LIMIT_EXCEEDED", "Too Many Requests", headers, wait)
                return _error(fault.status, "M_UNKNOWN", "Internal server error")
        return await handler(request)

    async def _media_config(self, _request: web.Request) -> web.Response:
        return web.json_response({"m.upload.size": self.max_upload})

    async def _upload(self, request: web.Request) -> web.Response:
        """POST /_matrix/media/v3/upload?filename=…: the body is the file (its type in
        Content-Type); answers its `content_uri`."""
        data = await request.read()
        if len(data) > self.max_upload:
            return _error(413, "M_TOO_LARGE", "Cannot upload files larger than the limit")
        media_id = f"m{next(self._ids):08d}"
        self.media[media_id] = (data, request.headers.get("Content-Type", ""))
        return web.json_response({"content_uri": f"mxc://{SERVER}/{media_id}"})

    def sent_files(self, room: str = "") -> list[dict[str, Any]]:
        """The bot's m.file messages (in `room`), oldest first: their content, with the
        uploaded bytes under "data" (still encrypted where the room is)."""
        found = []
        for event in self.stream:
            content = event.get("content") or {}
            if event.get("sender") != BOT or content.get("msgtype") != "m.file":
                continue
            if room and event.get("room_id") != room:
                continue
            url = str(content.get("url") or (content.get("file") or {}).get("url") or "")
            data, _ = self.media.get(url.rsplit("/", 1)[-1], (b"", ""))
            found.append({**content, "data": data})
        return found

    async def _whoami(self, request: web.Request) -> web.Response:
        me, device = request[ME], request[DEVICE_KEY]
        return web.json_response({"user_id": me, "device_id": device, "is_guest": False})

    async def _sync(self, request: web.Request) -> web.Response:
        since_token = request.query.get("since")
        # "s<room stream>_<to-device stream>": a token changes with either (as a real
        # one does: nio ignores a sync whose next_batch it has seen)
        since = int(since_token[1:].split("_")[0]) if since_token else None
        wait = int(request.query.get("timeout", "0")) / 1000
        try:
            limit = int(json.loads(request.query.get("filter", "{}"))["room"]["timeline"]["limit"])
        except (ValueError, KeyError, TypeError):
            limit = 10
        epoch = self._epoch
        if self._stopping:
            return web.Response(status=502, text="Bad Gateway")
        while self.paused and self._epoch == epoch:
            await asyncio.sleep(0.02)
        if self.down > 0:
            self.down -= 1
            return web.Response(status=502, text="Bad Gateway")
        me, device = request[ME], request[DEVICE_KEY]

        def news() -> bool:
            return (
                len(self.stream) > since  # type: ignore[operator]
                or self._epoch != epoch
                or bool(self._to_device.get((me, device)) or self._lists_changed.get(me))
            )

        if since is not None and not news() and wait > 0:
            async with self._condition():
                await _wait_for(
                    self._condition(),
                    news,
                    wait,
                )
        if self._epoch != epoch:
            return web.Response(status=502, text="Bad Gateway")
        if request[ME] == BOT:
            self.syncs += 1
        return web.json_response(self._sync_body(request[ME], request[DEVICE_KEY], since, limit))

    def _sync_body(self, me: str, device: str, since: int | None, limit: int) -> dict[str, Any]:
        now = len(self.stream)
        join: dict[str, Any] = {}
        invite: dict[str, Any] = {}
        leave: dict[str, Any] = {}
        for room_id, room in self.rooms.items():
            membership = room.members.get(me)
            changed = room.changed.get(me, 0)
            fresh = since is None or changed > since
            positions = [n for n, e in enumerate(self.stream[:now], 1) if e["room_id"] == room_id]
            if membership == "join":
                new = positions if fresh else [n for n in positions if n > since]  # type: ignore[operator]
                if not new and not fresh:
                    continue
                shown = new[-limit:] if limit > 0 else []
                timeline: dict[str, Any] = {
                    "events": [_client(self.stream[n - 1]) for n in shown],
                    "limited": len(shown) < len(new),
                    "prev_batch": f"t{(shown[0] - 1) if shown else now}",
                }
                entry: dict[str, Any] = {"timeline": timeline}
                if fresh:
                    state = [
                        _client(self._events[e["event_id"]])
                        for e in self._state(room_id)
                        if not shown
                        or e["event_id"] not in {self.stream[n - 1]["event_id"] for n in shown}
                    ]
                    entry["state"] = {"events": state}
                    joined = sum(1 for m in room.members.values() if m == "join")
                    invited = sum(1 for m in room.members.values() if m == "invite")
                    entry["summary"] = {
                        "m.joined_member_count": joined,
                        "m.invited_member_count": invited,
                    }
                join[room_id] = entry
            elif membership == "invite" and fresh:
                stripped = [
                    {k: e[k] for k in ("type", "state_key", "sender", "content")}
                    for e in self._state(room_id)
                ]
                invite[room_id] = {"invite_state": {"events": stripped}}
            elif membership == "leave" and fresh and since is not None:
                leave[room_id] = {"timeline": {"events": []}}
        counts = {"signed_curve25519": len(self._one_time.get((me, device), {}))}
        return {
            "next_batch": f"s{now}_{self._device_stream}",
            "rooms": {"join": join, "invite": invite, "leave": leave},
            "account_data": {"events": []},
            "presence": {"events": []},
            "to_device": {"events": self._to_device.pop((me, device), [])},
            "device_lists": {"changed": sorted(self._lists_changed.pop(me, set())), "left": []},
            "device_one_time_keys_count": counts,
        }

    def _state(self, room_id: str) -> list[dict[str, Any]]:
        """The room's current state events (the latest of each type and key)."""
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for event in self.stream:
            if event["room_id"] == room_id and "state_key" in event:
                latest[(event["type"], event["state_key"])] = event
        return list(latest.values())

    def _joined(self, request: web.Request) -> Room | web.Response:
        room = self.rooms.get(request.match_info["room"])
        if room is None or room.members.get(request[ME]) != "join":
            return _error(403, "M_FORBIDDEN", "You are not in this room.")
        return room

    def _transaction(self, request: web.Request) -> tuple[str, web.Response | None]:
        """The request's transaction (per client) and, when it was done already, the
        answer it had: a retried request does not post twice."""
        txn = f"{request[ME]}/{request.match_info['txn']}"
        done = self._txns.get(txn)
        return txn, None if done is None else web.json_response({"event_id": done})

    async def _send(self, request: web.Request) -> web.Response:
        room = self._joined(request)
        if isinstance(room, web.Response):
            return room
        txn, done = self._transaction(request)
        if done is not None:
            return done
        content = await request.json()
        kind = request.match_info["type"]
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace":
            self.edit_times.append(time.monotonic())
        event_id = await self._append(request.match_info["room"], request[ME], kind, content)
        self._txns[txn] = event_id
        return web.json_response({"event_id": event_id})

    async def _redact(self, request: web.Request) -> web.Response:
        room = self._joined(request)
        if isinstance(room, web.Response):
            return room
        txn, done = self._transaction(request)
        if done is not None:
            return done
        target = self._events.get(request.match_info["event"])
        if target is None:
            return _error(404, "M_NOT_FOUND", "Event not found.")
        if target["sender"] != request[ME]:
            return _error(403, "M_FORBIDDEN", "You cannot redact this event.")
        event_id = await self._append(
            request.match_info["room"],
            request[ME],
            "m.room.redaction",
            {},
            redacts=target["event_id"],
        )
        target["redacted"] = _client(self._events[event_id])
        target["content"] = {}
        self._txns[txn] = event_id
        return web.json_response({"event_id": event_id})

    async def _typing(self, request: web.Request) -> web.Response:
        self.typing.append(request.match_info["room"])
        return web.json_response({})

    async def _join(self, request: web.Request) -> web.Response:
        room_id = request.match_info["room"]
        room = self.rooms.get(room_id)
        me = request[ME]
        if room is None or room.members.get(me) not in ("invite", "join"):
            return _error(403, "M_FORBIDDEN", "You are not invited to this room.")
        if room.members[me] != "join":
            await self._member(room_id, me, "join")
        return web.json_response({"room_id": room_id})

    async def _leave(self, request: web.Request) -> web.Response:
        room_id = request.match_info["room"]
        if room_id in self.rooms:
            await self._member(room_id, request[ME], "leave")
        return web.json_response({})

    def _position(self, event_id: str) -> int:
        return next(n for n, e in enumerate(self.stream, 1) if e["event_id"] == event_id)

    async def _context(self, request: web.Request) -> web.Response:
        room = self._joined(request)
        if isinstance(room, web.Response):
            return room
        event = self._events.get(request.match_info["event"])
        if event is None or event["room_id"] != request.match_info["room"]:
            return _error(404, "M_NOT_FOUND", "Event not found.")
        position = self._position(str(event["event_id"]))
        return web.json_response(
            {
                "event": _client(event, room_id=True),
                "events_before": [],
                "events_after": [],
                "state": [],
                "start": f"t{position - 1}",
                "end": f"t{position}",
            }
        )

    async def _messages(self, request: web.Request) -> web.Response:
        room = self._joined(request)
        if isinstance(room, web.Response):
            return room
        room_id = request.match_info["room"]
        start = request.query.get("from", "")
        forward = request.query.get("dir", "b") == "f"
        limit = min(int(request.query.get("limit", "10")), 1000)
        at = (
            int(start[1:].split("_")[0])
            if start[:1] in ("t", "s")
            else (0 if forward else len(self.stream))
        )
        positions = [n for n, e in enumerate(self.stream, 1) if e["room_id"] == room_id]
        later = [n for n in positions if (n > at if forward else n <= at)]
        page = later[:limit] if forward else list(reversed(later))[:limit]
        body: dict[str, Any] = {
            "chunk": [_client(self.stream[n - 1], room_id=True) for n in page],
            "start": start or f"t{at}",
        }
        if len(page) < len(later):
            body["end"] = f"t{page[-1] if forward else page[-1] - 1}"
        return web.json_response(body)

    async def _event(self, request: web.Request) -> web.Response:
        room = self._joined(request)
        if isinstance(room, web.Response):
            return room
        event = self._events.get(request.match_info["event"])
        if event is None or event["room_id"] != request.match_info["room"]:
            return _error(404, "M_NOT_FOUND", "Event not found.")
        return web.json_response(_client(event, room_id=True))

    async def _create_room(self, request: web.Request) -> web.Response:
        body = await request.json()
        room_id = f"!new{next(self._ids)}:{SERVER}"
        self.rooms[room_id] = Room(direct=bool(body.get("is_direct")), inviter=BOT)
        await self._append(room_id, BOT, "m.room.create", {"room_version": "10"}, state_key="")
        await self._member(room_id, BOT, "join")
        for person in body.get("invite") or []:
            await self._member(room_id, str(person), "invite", by=BOT)
        return web.json_response({"room_id": room_id})

    async def _displayname(self, request: web.Request) -> web.Response:
        person = request.match_info["user"]
        if person == BOT:
            return web.json_response({"displayname": BOT_NAME})
        return web.json_response({"displayname": person[1:].split(":")[0]})

    async def _joined_members(self, request: web.Request) -> web.Response:
        room = self._joined(request)
        if isinstance(room, web.Response):
            return room
        joined = {u: {"display_name": u[1:].split(":")[0], "avatar_url": None}
                  for u, m in room.members.items() if m == "join"}  # fmt: skip
        return web.json_response({"joined": joined})

    async def _keys_upload(self, request: web.Request) -> web.Response:
        me, device = request[ME], request[DEVICE_KEY]
        body = await request.json()
        if body.get("device_keys"):
            self.device_keys.setdefault(me, {})[device] = body["device_keys"]
            for person, _device in self.tokens.values():  # everyone may share a room
                self._lists_changed.setdefault(person, set()).add(me)
            self._device_stream += 1
            await self._wake()
        keys = self._one_time.setdefault((me, device), {})
        keys.update(body.get("one_time_keys") or {})
        return web.json_response({"one_time_key_counts": {"signed_curve25519": len(keys)}})

    async def _keys_query(self, request: web.Request) -> web.Response:
        asked = (await request.json()).get("device_keys") or {}
        found = {
            person: {
                d: keys
                for d, keys in self.device_keys.get(person, {}).items()
                if not devices or d in devices
            }
            for person, devices in asked.items()
        }
        return web.json_response({"device_keys": found, "failures": {}})

    async def _keys_claim(self, request: web.Request) -> web.Response:
        asked = (await request.json()).get("one_time_keys") or {}
        claimed: dict[str, dict[str, Any]] = {}
        for person, devices in asked.items():
            for device, algorithm in devices.items():
                keys = self._one_time.get((person, device), {})
                key_id = next((k for k in keys if k.startswith(f"{algorithm}:")), None)
                if key_id is not None:
                    claimed.setdefault(person, {})[device] = {key_id: keys.pop(key_id)}
        return web.json_response({"one_time_keys": claimed, "failures": {}})

    async def _send_to_device(self, request: web.Request) -> web.Response:
        kind, sender = request.match_info["type"], request[ME]
        messages = (await request.json()).get("messages") or {}
        for person, devices in messages.items():
            for device, content in devices.items():
                targets = self.device_keys.get(person, {}) if device == "*" else [device]
                for target in targets:
                    event = {"type": kind, "sender": sender, "content": content}
                    self._to_device.setdefault((person, target), []).append(event)
        self._device_stream += 1
        await self._wake()
        return web.json_response({})

    async def _download(self, request: web.Request) -> web.Response:
        self.downloads += 1
        if self.broken_downloads:
            return _error(500, "M_UNKNOWN", "Internal server error")
        found = self.media.get(request.match_info["media"])
        if found is None or request.match_info["server"] != SERVER:
            return _error(404, "M_NOT_FOUND", "Not found")
        data, mime = found
        return web.Response(body=data, content_type=mime)


async def _wait_for(condition: asyncio.Condition, check: Any, wait: float) -> None:
    """Wait (holding `condition`) until `check()` or `wait` seconds have passed."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(condition.wait_for(check), wait)


def _client(event: dict[str, Any], *, room_id: bool = False) -> dict[str, Any]:
    """The event as clients get it (`room_id` outside a sync's rooms)."""
    shown = {k: v for k, v in event.items() if k not in ("room_id", "redacted")}
    if room_id:
        shown["room_id"] = event["room_id"]
    if event.get("redacted"):
        shown["unsigned"] = {"redacted_because": event["redacted"]}
    return shown


def _error(
    status: int,
    errcode: str,
    message: str,
    headers: dict[str, str] | None = None,
    retry_after_ms: int | None = None,
) -> web.Response:
    body: dict[str, Any] = {"errcode": errcode, "error": message}
    if retry_after_ms is not None:
        body["retry_after_ms"] = retry_after_ms
    return web.json_response(body, status=status, headers=headers)
