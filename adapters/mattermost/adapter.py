"""Mattermost through its REST API v4 and its websocket, with aiohttp.

`to_event` is pure over a post as the API gives it. The adapter authenticates with a
bot account's token (`Authorization: Bearer`), listens on `/api/v4/websocket` for
`posted` events (reconnecting by itself, with backoff), posts, edits and deletes with
`/api/v4/posts`, and answers in the thread of the message in channels. Approval
buttons are interactive message attachments: Mattermost keeps each action's
integration URL and context on its side (clients never see them) and POSTs the press to
the gateway's HTTP server with the context; the context carries the button's command
and an HMAC of it under a key only this process knows, so a press is taken only when it
came through Mattermost for a button a gateway of this bot made (the key is derived
from the bot's token). Without `actions_url` there are
no buttons: the commands are written out to type.

Mattermost does not redeliver what was posted while no client listened: the gateway
asks `missed` (posts after each chat's last mark, `GET /channels/{id}/posts?since=`)
whenever the websocket connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from typing import Any

import aiohttp
from aiohttp import web

from gateway.edge.events import (
    Attachment,
    Button,
    ChatRef,
    ChatType,
    MessageEvent,
    OutboundFile,
    OutboundMessage,
    SendResult,
    UserRef,
)
from gateway.edge.http_server import Route
from gateway.edge.ports import (
    CATCH_UP_WINDOW,
    MOST_MARKS,
    Capabilities,
    ChatMark,
    DownloadError,
    EventSink,
    bounded,
)

logger = logging.getLogger(__name__)

MAX_POST_CHARS = 16_383  # the server's default MaxPostSize (runes)
CHANNEL_TYPES = {"D": ChatType.DM, "G": ChatType.GROUP, "O": ChatType.CHANNEL}
PERMANENT = {400, 401, 403, 404, 413}
RECONNECT_FIRST_S, RECONNECT_MAX_S = 1.0, 30.0
GIVE_UP_AFTER = 8  # failed connection attempts in a row: "lost" (the gateway restarts it)
HISTORY_PAGE = 200  # the API's largest page


def _kind(mime: str) -> str:
    if mime.startswith("image/"):
        return "photo"
    if mime.startswith("audio/"):
        return "voice" if "ogg" in mime or "webm" in mime else "audio"
    if mime.startswith("video/"):
        return "video"
    return "document"


def to_event(
    post: dict[str, Any],
    bot_id: str,
    bot_name: str,
    channel_type: str,
    *,
    sender: str = "",
    mentions: list[str] | None = None,
) -> MessageEvent | None:
    """A post as a message event; None for the bot's own posts and system messages
    (joins, header changes: their `type` is set)."""
    user_id = str(post.get("user_id") or "")
    if not user_id or user_id == bot_id or post.get("type"):
        return None
    chat_type = CHANNEL_TYPES.get(channel_type, ChatType.CHANNEL)  # P: a private channel
    text = str(post.get("message") or "")
    tag = f"@{bot_name}"
    mentioned = (
        bot_id in (mentions or [])
        or re.search(rf"(?<![\w.-]){re.escape(tag)}(?![\w.-])", text, re.IGNORECASE) is not None
    )
    if mentioned:
        text = re.sub(rf"(?<![\w.-]){re.escape(tag)}(?![\w.-])", "", text, flags=re.I).strip()
    root = str(post.get("root_id") or "") or None
    dm = chat_type is ChatType.DM
    files = (post.get("metadata") or {}).get("files") or []
    attachments = tuple(
        Attachment(
            kind=_kind(str(f.get("mime_type") or "")),  # type: ignore[arg-type]
            name=str(f.get("name") or ""),
            mime=str(f.get("mime_type") or ""),
            size=int(f["size"]) if isinstance(f.get("size"), int) else None,
            ref=str(f.get("id") or ""),
        )
        for f in files
        if f.get("id")
    )
    created = int(post.get("create_at") or 0)
    post_id = str(post["id"])
    return MessageEvent(
        platform="mattermost",
        event_id=post_id,
        message_id=post_id,
        chat=ChatRef(str(post["channel_id"]), chat_type, None if dm else root),
        user=UserRef(user_id, sender.lstrip("@")),
        text=text,
        reply_to_id=root,
        mentioned=mentioned,
        attachments=attachments,
        sent_at=created / 1000 if created else None,
        order=created,
        raw=post,
    )


class MattermostAdapter:
    name = "mattermost"

    def __init__(
        self,
        url: str,
        token: str,
        *,
        actions_url: str | None = None,
        path: str = "/mattermost/actions",
    ) -> None:
        self.url = url.rstrip("/")
        self.api = f"{self.url}/api/v4"
        self._headers = {"Authorization": f"Bearer {token}"}
        self._token = token
        self.actions_url = actions_url
        self.path = path
        self.capabilities = Capabilities(
            max_length=MAX_POST_CHARS,
            edit_interval_s=1.0,  # the server's rate limit: 10 a second per user by default
            group_edit_interval_s=1.0,
            buttons=actions_url is not None,
            max_file_bytes=100 * 1024 * 1024,  # the server's FileSettings.MaxFileSize default
        )
        # signs the buttons' commands: from the token, so every gateway of this bot (and
        # this one after a restart) takes the presses of buttons any of them made
        self._key = hashlib.sha256(b"hermes mattermost buttons\0" + token.encode()).digest()
        self._http: aiohttp.ClientSession | None = None
        self._sink: EventSink | None = None
        self._socket_task: asyncio.Task[None] | None = None
        self._state = "connecting"
        self._unseen_reconnect = False  # a reconnect the gateway has not been told of yet
        self.bot_id = ""
        self.bot_name = ""
        self._channel_types: dict[str, str] = {}

    # -- lifecycle -------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            timeout = aiohttp.ClientTimeout(total=60, sock_connect=10)
            self._http = aiohttp.ClientSession(headers=self._headers, timeout=timeout)
        return self._http

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One API call: its JSON body; MattermostError for an error status."""
        async with self._session().request(method, self.api + path, **kwargs) as response:
            body = await response.read()
            if response.status >= 400:
                raise MattermostError.of(response.status, body, response.headers)
            return json.loads(body) if body else None

    async def whoami(self) -> str:
        try:
            me = await self._call("GET", "/users/me")
            return f"@{me.get('username')} ({me.get('id')}) on {self.url}"
        finally:
            await self.stop()

    async def _identify(self) -> None:
        """Who the bot is (its id and name), asked once."""
        if not self.bot_id:
            me = await self._call("GET", "/users/me")
            self.bot_id, self.bot_name = str(me["id"]), str(me.get("username") or "")

    async def serve(self, sink: EventSink) -> None:
        """Another instance holds the websocket: take the presses POSTed here (the
        balancer picks any instance) and send, over REST, without a websocket (who the
        bot is, asked when a DM is opened: a server down now is not a failure here)."""
        self._sink = sink

    async def start(self, sink: EventSink) -> None:
        await self._identify()
        self._sink = sink
        first = asyncio.get_running_loop().create_future()
        self._socket_task = asyncio.create_task(self._listen(first))
        await first  # connected and authenticated once (or raises why not)

    async def stop_intake(self) -> None:
        """Close the websocket: what is posted from now on is caught up by the next run
        (from the chats' marks)."""
        task, self._socket_task = self._socket_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def stop(self) -> None:
        self._sink = None
        await self.stop_intake()
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def connection(self) -> str:
        if self._state == "connected" and self._unseen_reconnect:
            self._unseen_reconnect = False  # said once: the gateway then catches up
            return "reconnecting: the websocket connected again"
        return self._state

    # -- the websocket -----------------------------------------------------------------------

    async def _listen(self, first: asyncio.Future[None]) -> None:
        """Keep the websocket open: reconnect after 1 s, 2 s, 4 s... (at most 30 s);
        "lost" after GIVE_UP_AFTER failed attempts in a row (the gateway restarts it). A
        failure before the first connection is `start`'s."""
        wait, failures = RECONNECT_FIRST_S, 0
        while True:
            authenticated = False
            try:
                authenticated, why = await self._connect_once(first)
            except asyncio.CancelledError:
                raise
            except (MattermostError, aiohttp.ClientError, TimeoutError, ValueError, OSError) as exc:
                if not first.done():
                    first.set_exception(exc)
                    return
                why = str(exc) if isinstance(exc, MattermostError) else f"{type(exc).__name__}"
            if authenticated:
                wait, failures = RECONNECT_FIRST_S, 0
            failures += 1
            lost = failures >= GIVE_UP_AFTER
            self._state = f"{'lost' if lost else 'reconnecting'}: {why}"
            if lost:
                return
            await asyncio.sleep(wait)
            wait = min(wait * 2, RECONNECT_MAX_S)

    async def _connect_once(self, first: asyncio.Future[None]) -> tuple[bool, str]:
        """One websocket connection, authenticated with the token, read until it closes:
        whether it was authenticated, and why it ended."""
        authenticated = False
        ws_url = re.sub(r"^http", "ws", self.api) + "/websocket"
        async with self._session().ws_connect(ws_url, heartbeat=30.0) as socket:
            challenge = {"token": self._token}
            await socket.send_json(
                {"seq": 1, "action": "authentication_challenge", "data": challenge}
            )
            async for frame in socket:
                if frame.type is not aiohttp.WSMsgType.TEXT:
                    break
                data = json.loads(frame.data)
                if data.get("seq_reply") == 1:
                    if data.get("status") != "OK":
                        error = (data.get("error") or {}).get("message", "refused")
                        raise MattermostError(401, f"websocket authentication: {error}")
                    authenticated = True
                    if not first.done():
                        first.set_result(None)
                    elif self._state != "connected":
                        self._unseen_reconnect = True
                    self._state = "connected"
                elif data.get("event") == "posted":
                    await self._posted(data.get("data") or {})
        return authenticated, f"the websocket closed ({socket.close_code})"

    async def _posted(self, data: dict[str, Any]) -> None:
        try:
            post = json.loads(data.get("post") or "{}")
            mentions = json.loads(data.get("mentions") or "[]")
        except ValueError:
            logger.warning("mattermost: a posted event whose post is not JSON: skipped")
            return
        channel_type = str(data.get("channel_type") or "O")
        if post.get("channel_id"):
            self._channel_types[str(post["channel_id"])] = channel_type
        event = to_event(
            post,
            self.bot_id,
            self.bot_name,
            channel_type,
            sender=str(data.get("sender_name") or ""),
            mentions=mentions if isinstance(mentions, list) else [],
        )
        if event is not None and self._sink is not None:
            await self._sink(event)

    # -- catching up -------------------------------------------------------------------------

    async def missed(self, marks: list[ChatMark], most: int) -> list[MessageEvent]:
        """Each chat's posts after its mark (`since` its creation time, newer first in
        the answer's `order`), oldest first, at most `most`; edits of older posts are
        not new messages. A chat that cannot be read any more is skipped. The bot's
        channels without a recent mark are read too (`_never_read`)."""
        found = await self._never_read({m.chat.id for m in marks}, most, len(marks))
        for mark in marks:
            code = {ChatType.DM: "D", ChatType.GROUP: "G"}.get(mark.chat.type, "O")
            found.extend(await self._posts_since(mark.chat.id, code, mark.order, most))
        return found

    async def _posts_since(
        self, channel: str, code: str, since: int, most: int
    ) -> list[MessageEvent]:
        """The channel's posts created after `since` (ms), oldest first, at most `most`
        ([] for a channel the bot cannot read)."""
        try:
            page = await self._call(
                "GET", f"/channels/{channel}/posts", params={"since": str(since)}
            )
        except MattermostError as exc:
            if exc.status in (403, 404):
                logger.info("mattermost: cannot read channel %s: %s", channel, exc)
                return []
            raise
        posts = (page or {}).get("posts") or {}
        newer = sorted(
            (p for p in posts.values() if int(p.get("create_at") or 0) > since),
            key=lambda p: (int(p.get("create_at") or 0), str(p.get("id"))),
        )
        events = (to_event(p, self.bot_id, self.bot_name, code) for p in newer)
        return [e for e in events if e is not None][:most]

    async def _never_read(self, marked: set[str], most: int, marks: int) -> list[MessageEvent]:
        """The posts of the last CATCH_UP_WINDOW in the bot's channels that have no
        mark (a person's first message, sent while no gateway listened): a channel read
        in that time has a mark, so nothing is answered twice. Skipped when the marks
        may be cut short (as many as the gateway passes at most)."""
        if marks >= MOST_MARKS:
            return []
        since = int((time.time() - CATCH_UP_WINDOW.total_seconds()) * 1000)
        # every channel of the bot in every team, and its DMs (a bot in no team has
        # those too): the server sends the whole list (Mattermost 6.1 and later)
        listed = await self._call("GET", "/users/me/channels") or []
        channels = {str(c["id"]): c for c in listed}
        found: list[MessageEvent] = []
        for channel_id, channel in channels.items():
            if channel_id in marked or int(channel.get("last_post_at") or 0) <= since:
                continue
            code = str(channel.get("type") or "O")
            self._channel_types[channel_id] = code
            found.extend(await self._posts_since(channel_id, code, since, most))
        return found

    # -- sending ---------------------------------------------------------------------------

    def _props(self, buttons: tuple[Button, ...] | None) -> dict[str, Any] | None:
        """Buttons as an interactive message attachment (None: no change; {} removes)."""
        if buttons is None:
            return None
        if not buttons or self.actions_url is None:
            return {"attachments": []}
        actions = [
            {
                "id": f"hermes{n}",
                "name": button.label,
                "style": {"primary": "primary", "danger": "danger"}.get(button.style, "default"),
                "integration": {
                    "url": self.actions_url,
                    "context": {"command": button.command, "sig": self._sign(button.command)},
                },
            }
            for n, button in enumerate(buttons)
        ]
        return {"attachments": [{"actions": actions}]}

    def _sign(self, command: str) -> str:
        return hmac.new(self._key, command.encode(), hashlib.sha256).hexdigest()

    async def send(self, message: OutboundMessage) -> SendResult:
        body: dict[str, Any] = {"message": message.as_sent(str)}
        props = self._props(message.buttons)
        if props:
            body["props"] = props
        return await self._post(message.chat, message.reply_to_id, body)

    async def send_file(self, file: OutboundFile) -> SendResult:
        """POST /files (multipart: the channel and the file), then a post carrying its
        id with the caption as its message. An upload that fails posted nothing: it is
        safe to make again."""
        form = aiohttp.FormData()
        form.add_field("channel_id", file.chat.id)
        form.add_field("files", file.data, filename=file.name, content_type=file.mime)
        try:
            uploaded = await self._call("POST", "/files", data=form)
        except MattermostError as exc:
            return exc.result()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}", retryable=True)
        ids = [str(info["id"]) for info in uploaded.get("file_infos") or []]
        body = {"message": file.caption, "file_ids": ids}
        return await self._post(file.chat, file.reply_to_id, body)

    async def _post(
        self, chat: ChatRef, reply_to_id: str | None, body: dict[str, Any]
    ) -> SendResult:
        """POST /posts into `chat` (in channels: in the thread of the message answered)."""
        root = chat.thread_id
        if root is None and chat.type is not ChatType.DM and reply_to_id:
            root = reply_to_id
        try:
            post = await self._call(
                "POST", "/posts", json={"channel_id": chat.id, "root_id": root or "", **body}
            )
        except MattermostError as exc:
            return exc.result()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:  # it may be posted
            return SendResult(
                False, error=f"outcome unknown: {type(exc).__name__}: {exc}", outcome_unknown=True
            )
        return SendResult(True, (str(post["id"]),))

    async def edit(self, chat: ChatRef, message_id: str, message: OutboundMessage) -> SendResult:
        """PUT /posts/{id}/patch (safe to repeat)."""
        body: dict[str, Any] = {"message": message.as_sent(str)}
        props = self._props(message.buttons)
        if props is not None:
            body["props"] = props
        try:
            await self._call("PUT", f"/posts/{message_id}/patch", json=body)
        except MattermostError as exc:
            return exc.result()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}", retryable=True)
        return SendResult(True, (message_id,))

    async def delete(self, chat: ChatRef, message_id: str) -> SendResult:
        try:
            await self._call("DELETE", f"/posts/{message_id}")
        except MattermostError as exc:
            return exc.result()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}", retryable=True)
        return SendResult(True, (message_id,))

    async def typing(self, chat: ChatRef) -> None:
        body = {"channel_id": chat.id, "parent_id": chat.thread_id or ""}
        with contextlib.suppress(MattermostError, aiohttp.ClientError, TimeoutError, OSError):
            await self._call("POST", "/users/me/typing", json=body)

    async def direct_chat(self, platform_user_id: str) -> ChatRef | None:
        """POST /channels/direct: the DM channel of the bot and that user."""
        try:
            await self._identify()
            channel = await self._call(
                "POST", "/channels/direct", json=[self.bot_id, platform_user_id]
            )
        except (MattermostError, aiohttp.ClientError, TimeoutError, OSError) as exc:
            logger.warning("mattermost: cannot open a DM with %s: %s", platform_user_id, exc)
            return None
        return ChatRef(str(channel["id"]), ChatType.DM)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """GET /files/{id}, with the bot's token, stopped past `max_bytes`."""
        if attachment.size is not None and attachment.size > max_bytes:
            raise DownloadError.too_big(attachment.size, max_bytes)
        if not attachment.ref:
            raise DownloadError("Mattermost did not say which file it is.")
        try:
            async with self._session().get(f"{self.api}/files/{attachment.ref}") as response:
                if response.status != 200:
                    raise DownloadError(f"Mattermost answered HTTP {response.status} for the file.")
                data = await bounded(response.content.iter_chunked(64 * 1024), max_bytes)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DownloadError(f"The download failed ({type(exc).__name__}).") from None
        return data

    # -- button presses ------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        """Where Mattermost POSTs a button's press (`actions_url` points here)."""
        return [Route("POST", self.path, self._on_action)] if self.actions_url else []

    async def _on_action(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            context = body.get("context") or {}
            command, sig = str(context.get("command") or ""), str(context.get("sig") or "")
            user_id, channel_id = str(body["user_id"]), str(body["channel_id"])
            post_id = str(body.get("post_id") or "")
        except (ValueError, KeyError, TypeError, AttributeError):
            return web.json_response({"error": "not a button press"}, status=400)
        if not command or not hmac.compare_digest(sig, self._sign(command)):
            logger.warning("mattermost: a button press this gateway did not sign: refused")
            return web.json_response({"error": "not a button of this gateway"}, status=403)
        if self._sink is None:
            return web.json_response({"ephemeral_text": "Starting: press again in a moment."})
        channel_type = await self._channel_type(channel_id)
        event = MessageEvent(
            platform="mattermost",
            event_id=f"press:{post_id}:{body.get('trigger_id') or secrets.token_hex(8)}",
            message_id=f"press:{post_id}:{secrets.token_hex(4)}",
            chat=ChatRef(channel_id, CHANNEL_TYPES.get(channel_type, ChatType.CHANNEL)),
            user=UserRef(user_id, str(body.get("user_name") or "")),
            text=command,
            reply_to_id=post_id or None,
            mentioned=True,
            pressed=True,
        )
        await self._sink(event)
        return web.json_response({})  # the message is updated when the command is decided

    async def _channel_type(self, channel_id: str) -> str:
        """The channel's type ("D" a DM, "G" a group DM, "O"/"P" channels): known from
        its posts, else asked (a press on an instance whose websocket saw none)."""
        if channel_id not in self._channel_types:
            try:
                channel = await self._call("GET", f"/channels/{channel_id}")
                self._channel_types[channel_id] = str(channel.get("type") or "O")
            except (MattermostError, aiohttp.ClientError, TimeoutError, AttributeError) as exc:
                logger.warning("mattermost: the channel %s is unknown: %s", channel_id, exc)
                return "O"
        return self._channel_types[channel_id]


class MattermostError(Exception):
    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after

    @classmethod
    def of(cls, status: int, body: bytes, headers: Any) -> MattermostError:
        try:
            message = str(json.loads(body).get("message") or "")
        except (ValueError, AttributeError):
            message = ""
        retry = headers.get("Retry-After") if status == 429 else None
        try:
            retry_after = float(retry) if retry is not None else None
        except ValueError:
            retry_after = None
        return cls(status, message or f"HTTP {status}", retry_after)

    def result(self) -> SendResult:
        """What this refusal means for sending again."""
        if self.status == 429:
            return SendResult(
                False, error="rate limited", retryable=True, retry_after=self.retry_after or 1.0
            )
        return SendResult(
            False,
            error=f"HTTP {self.status}: {self}",
            retryable=self.status >= 500 and self.status not in PERMANENT,
        )
