"""Matrix through matrix-nio's AsyncClient (the client-server API).

`to_event` is pure over an event as the homeserver sends it. The adapter logs in with
an access token, syncs in a loop (long polls from the last `next_batch`, retried with
backoff; "lost" after GIVE_UP_AFTER failures), accepts the invitations its config allows
(declining the others), sends with `m.room.message`, streams a reply by editing it
(`m.replace`), deletes by redaction, and reads files from the content repository
(authenticated media) within the gateway's limits.

Rooms: a room whose only members are the bot and one person, or one that person opened
as a direct chat, is a DM; in other rooms the bot answers when mentioned (the
intentional `m.mentions`, its id, or its name at the start of a line), in the thread
the message was in, else as a reply to it.

Approval buttons: Matrix clients show no buttons, so a message that has them ends with
a numbered line ("1️⃣ Approve  2️⃣ Deny") and the bot reacts with those keys under it; a
person presses by reacting with the same key, or by replying with the number (clients
without reactions). The buttons' commands travel in the message's own content
(BUTTONS), so a reaction is read against the message the homeserver says the bot sent:
any instance, and this one after a restart, takes it.

Catching up: the first sync after a start only learns where the stream is (and the
pending invitations); what was written while no gateway synced is fetched from each
chat's mark (`missed`: the mark's context, then `/messages` forward), so a restart, or
another instance taking the lease over, answers it once and in order, from the marks in
the shared database rather than from a sync token one process kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
from nio import (
    AsyncClient,
    AsyncClientConfig,
    ContentRepositoryConfigResponse,
    ErrorResponse,
    MessageDirection,
    ProfileGetDisplayNameResponse,
    RoomContextResponse,
    RoomCreateResponse,
    RoomGetEventResponse,
    RoomMessagesResponse,
    RoomPreset,
    RoomSendResponse,
    SyncResponse,
    UploadResponse,
    WhoamiResponse,
)
from nio.crypto.attachments import decrypt_attachment
from nio.exceptions import EncryptionError, LocalProtocolError, OlmTrustError

from adapters.matrix.render import to_html
from gateway.edge.events import (
    Attachment,
    ChatRef,
    ChatType,
    MessageEvent,
    OutboundFile,
    OutboundMessage,
    SendResult,
    UserRef,
)
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

MAX_BYTES = 16_000  # a message's Markdown, in UTF-8 bytes (an event is at most 64 KiB:
# the body, its HTML and the JSON around them)
EVENT_BYTES = 60_000  # past this the HTML is left out (the body alone is sent)
SYNC_TIMEOUT_MS = 30_000
UNREAD_LIMIT = 20  # the latest messages of each room the first sync brings
FIRST_FILTER = {"room": {"timeline": {"limit": UNREAD_LIMIT}}, "presence": {"not_types": ["*"]}}
FILTER = {"room": {"timeline": {"limit": 50}}, "presence": {"not_types": ["*"]}}
RECONNECT_FIRST_S, RECONNECT_MAX_S = 1.0, 30.0
GIVE_UP_AFTER = 8  # failed syncs in a row: "lost" (the gateway restarts the platform)
HISTORY_PAGE = 100
BUTTONS = "org.hermes.buttons"  # a message's buttons, in its content: [{key, label, command}]
KEYS = tuple(f"{n}\ufe0f\u20e3" for n in range(1, 10))  # 1️⃣ ... 9️⃣
NUMBER = re.compile(r"^\s*([1-9])(?:\ufe0f?\u20e3)?\s*$")
VOICE = ("org.matrix.msc3245.voice", "org.matrix.msc1767.audio")
PERMANENT = {"M_FORBIDDEN", "M_NOT_FOUND", "M_UNKNOWN_TOKEN", "M_MISSING_TOKEN", "M_TOO_LARGE"}
Invites = Literal["allowed", "direct", "anyone"]
ENCRYPTED = "encrypted:"  # an attachment's ref: an encrypted file's JSON follows
# files the bot sends: the homeserver's m.upload.size when it says (asked at start), at
# most this (Synapse's default max_upload_size)
MAX_UPLOAD = 50 * 1024 * 1024


def _relation(content: dict[str, Any]) -> dict[str, Any]:
    relates = content.get("m.relates_to")
    return relates if isinstance(relates, dict) else {}


def _reply_to(content: dict[str, Any]) -> str | None:
    """The event a message replies to (not a thread's fallback reply)."""
    relates = _relation(content)
    if relates.get("is_falling_back"):
        return None
    reply = relates.get("m.in_reply_to")
    return str(reply["event_id"]) if isinstance(reply, dict) and reply.get("event_id") else None


def _strip_fallback(text: str) -> str:
    """A reply's body without the quoted lines older clients put before it."""
    lines = text.split("\n")
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).lstrip("\n")


def mentioned(content: dict[str, Any], bot_id: str, bot_name: str) -> tuple[bool, str]:
    """Whether the message mentions the bot (intentional mentions, its id, a link to
    it, or its name at the start), and its text without the mention."""
    text = str(content.get("body") or "")
    said = content.get("m.mentions")
    ids = said.get("user_ids") if isinstance(said, dict) else None
    html = str(content.get("formatted_body") or "")
    local = bot_id[1:].split(":", maxsplit=1)[0]
    names = {re.escape(n) for n in (bot_name, local) if n}
    at_start = re.compile(rf"^\s*@?(?:{'|'.join(names)})\s*[:,]\s*", re.IGNORECASE)
    found = (
        (isinstance(ids, list) and bot_id in ids)
        or bot_id in text
        or f"matrix.to/#/{bot_id}" in html
        or bool(names and at_start.search(text))
    )
    if found:
        text = text.replace(bot_id, "")
        if names:
            text = at_start.sub("", text, count=1)
            text = re.sub(rf"^\s*(?:{'|'.join(names)})\s+", "", text, flags=re.IGNORECASE)
        text = text.strip()
    return found, text


def _attachment(content: dict[str, Any]) -> Attachment | None:
    """The file a message carries: its `url`, or in an encrypted room its `file` (the
    address with the key to decrypt it: the ref is that JSON, ENCRYPTED before it)."""
    url = content.get("url")
    file = content.get("file")
    if isinstance(file, dict) and str(file.get("url") or "").startswith("mxc://"):
        url = ENCRYPTED + json.dumps(file)
    elif not isinstance(url, str) or not url.startswith("mxc://"):
        return None
    given = content.get("info")
    info: dict[str, Any] = given if isinstance(given, dict) else {}
    mime = str(info.get("mimetype") or "")
    msgtype = content.get("msgtype")
    voice = msgtype == "m.audio" and any(k in content for k in VOICE)
    if msgtype == "m.image" and not mime.startswith("image/"):
        mime = mime or "image/jpeg"
    size, duration = info.get("size"), info.get("duration")
    return Attachment(
        kind=Attachment.kind_for(mime, voice=voice),
        name=str(content.get("filename") or content.get("body") or ""),
        mime=mime,
        size=size if isinstance(size, int) else None,
        ref=url,
        duration=duration / 1000 if isinstance(duration, int | float) else None,
    )


def to_event(
    raw: dict[str, Any], room_id: str, chat_type: ChatType, bot_id: str, bot_name: str = ""
) -> MessageEvent | None:
    """An `m.room.message` event as a message event; None for the bot's own messages,
    edits (`m.replace`), notices (other bots' messages: never answered, so two bots
    cannot talk in a loop), redacted and unreadable events."""
    content = raw.get("content")
    sender = str(raw.get("sender") or "")
    if (
        raw.get("type") != "m.room.message"
        or not isinstance(content, dict)
        or not sender
        or sender == bot_id
        or "redacted_because" in (raw.get("unsigned") or {})
    ):
        return None
    msgtype = content.get("msgtype")
    relates = _relation(content)
    if msgtype == "m.notice" or not msgtype or relates.get("rel_type") == "m.replace":
        return None
    attachment = _attachment(content)
    text = str(content.get("body") or "")
    if attachment is not None:  # the body is a caption only when a file name is beside it
        named = content.get("filename")
        text = text if isinstance(named, str) and named and named != text else ""
    reply_to = _reply_to(content)
    if reply_to is not None:
        text = _strip_fallback(text)
    found, text = mentioned({**content, "body": text}, bot_id, bot_name)
    if msgtype == "m.emote":
        text = f"* {text}"
    thread = str(relates["event_id"]) if relates.get("rel_type") == "m.thread" else None
    ts = raw.get("origin_server_ts")
    sent = int(ts) if isinstance(ts, int) else 0
    event_id = str(raw["event_id"])
    return MessageEvent(
        platform="matrix",
        event_id=event_id,
        message_id=event_id,
        chat=ChatRef(room_id, chat_type, None if chat_type is ChatType.DM else thread),
        user=UserRef(sender),
        text=text,
        reply_to_id=reply_to,
        mentioned=found,
        attachments=(attachment,) if attachment is not None else (),
        sent_at=sent / 1000 if sent else None,
        order=sent,
        raw=raw,
    )


def _media_path(mxc: str) -> str:
    server, _, media = mxc.removeprefix("mxc://").partition("/")
    if not server or not media or "/" in media or not mxc.startswith("mxc://"):
        raise DownloadError("Matrix gave a file address I cannot read.")
    return f"/_matrix/client/v1/media/download/{server}/{media}"


def _key_store() -> type[Any]:
    """nio's key store (SQLite), committing without waiting for the disk: nio writes it
    on the event loop as it reads a sync (device lists, sessions, room keys), and a
    commit that waits for fsync stalls every chat of the gateway meanwhile. In WAL mode
    with synchronous=NORMAL a commit is a write to the log, synced at checkpoints: a
    killed process loses nothing; a machine losing power may lose the last keys, which
    the devices share again when a message cannot be decrypted."""
    from nio.store import DefaultStore  # noqa: PLC0415 - the e2e extra (peewee)

    class KeyStore(DefaultStore):  # type: ignore[misc]
        def _create_database(self) -> Any:
            database = super()._create_database()  # peewee's SqliteDatabase, nio's pragmas
            pragmas = {"foreign_keys": 1, "secure_delete": 1, "journal_mode": "wal"}
            database.init(self.database_path, pragmas={**pragmas, "synchronous": 1})
            return database

    return KeyStore


class MatrixAdapter:
    name = "matrix"

    def __init__(
        self,
        homeserver: str,
        user_id: str,
        token: str,
        *,
        allowed_users: Sequence[str] = (),
        allowed_chats: Sequence[str] = (),
        invites: Invites = "allowed",
        store: Path | None = None,
    ) -> None:
        self.homeserver = homeserver.rstrip("/")
        self.bot_id = user_id
        self.bot_name = ""
        self._token = token
        self._allowed_users = set(allowed_users)
        self._allowed_chats = set(allowed_chats)
        self._invites = invites
        # end-to-end encryption: the device's keys live here (None: encrypted rooms are
        # not read; the bot says so once in each)
        self._store = store
        self.capabilities = Capabilities(
            max_length=MAX_BYTES,
            length=lambda text: len(text.encode("utf-8")),
            # Synapse's default message rate is bursts of 10, then one per 5 s: the docs
            # say to lift it for the bot's account, else long replies wait on 429s
            edit_interval_s=1.0,
            group_edit_interval_s=2.0,
            max_file_bytes=MAX_UPLOAD,
        )
        self._sink: EventSink | None = None
        self._task: asyncio.Task[None] | None = None
        self._state = "connecting"
        self._unseen_gap = False  # a sync skipped events: the gateway is told once
        self._direct: set[str] = set()  # rooms opened as direct chats
        # the first sync's latest events of each room, for the first catch-up
        self._unread: dict[str, list[dict[str, Any]]] = {}
        self._told_encrypted: set[str] = set()
        # the buttons of the messages this process sent (the rest are read from the server)
        self._buttons: OrderedDict[str, list[dict[str, str]]] = OrderedDict()
        self._reactions: dict[str, list[str]] = {}  # a message: the bot's own key reactions
        self._http: aiohttp.ClientSession | None = None
        self.client = self._client()

    def _client(self) -> AsyncClient:
        # nio retries 429s and timeouts forever by default: the gateway's delivery
        # decides about a refused send instead (it knows the chat's other replies)
        config = AsyncClientConfig(
            max_limit_exceeded=0,
            max_timeouts=0,
            request_timeout=45,
            encryption_enabled=self._store is not None,
            store_sync_tokens=False,  # the marks say where to catch up from
            **({"store": _key_store()} if self._store is not None else {}),
        )
        store = str(self._store) if self._store is not None else ""
        client = AsyncClient(self.homeserver, self.bot_id, config=config, store_path=store)
        client.access_token = self._token
        return client

    # -- lifecycle -------------------------------------------------------------------------

    async def whoami(self) -> str:
        try:
            who = await self._whoami()
            return f"{who.user_id} (device {who.device_id}) on {self.homeserver}"
        finally:
            await self.stop()

    async def _whoami(self) -> WhoamiResponse:
        who = await self.client.whoami()
        if not isinstance(who, WhoamiResponse):
            raise MatrixError.of(who)
        if who.user_id != self.bot_id:
            raise MatrixError(
                f"the token is {who.user_id}'s, not {self.bot_id}'s (platforms.matrix.user_id)"
            )
        self.client.user_id, self.client.device_id = who.user_id, who.device_id or ""
        if self._store is not None and self.client.olm is None:
            if not who.device_id:
                raise MatrixError("the homeserver names no device for this token (encryption)")
            self._store.mkdir(mode=0o700, parents=True, exist_ok=True)
            # the device's keys, made at the first start and kept: the same token is the
            # same device, so people's clients keep trusting it across restarts
            self.client.restore_login(who.user_id, who.device_id, self._token)
        return who

    async def start(self, sink: EventSink) -> None:
        """Log in, then one sync to learn where the stream is (what came before is the
        catch-up's) and take the pending invitations; then sync in the background."""
        if self.client.client_session is None or self.client.client_session.closed:
            self.client = self._client()
        await self._whoami()
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
            named = await self.client.get_displayname(self.bot_id)  # "Hermes: ..." mentions
            if isinstance(named, ProfileGetDisplayNameResponse) and named.displayname:
                self.bot_name = named.displayname
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
            media = await self.client.content_repository_config()  # the server's upload limit
            if isinstance(media, ContentRepositoryConfigResponse) and media.upload_size:
                limit = min(media.upload_size, MAX_UPLOAD)
                self.capabilities = replace(self.capabilities, max_file_bytes=limit)
        first = await self.client.sync(timeout=0, sync_filter=FIRST_FILTER)
        if not isinstance(first, SyncResponse):
            raise MatrixError.of(first)
        self._sink = sink
        await self._keys()
        await self._on_sync(first, live=False)
        self._state = "connected"
        self._task = asyncio.create_task(self._sync_loop())

    async def stop_intake(self) -> None:
        """Stop syncing: what arrives from now on is caught up by the next run."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def stop(self) -> None:
        await self.stop_intake()
        await self.client.close()
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def connection(self) -> str:
        if self._state == "connected" and self._unseen_gap:
            self._unseen_gap = False  # said once: the gateway then catches up from its marks
            return "reconnecting: a sync skipped events"
        return self._state

    # -- syncing ---------------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        wait, failures = RECONNECT_FIRST_S, 0
        while True:
            try:
                # after a failure the first sync returns at once: recovery shows at once
                wait_ms = 0 if failures else SYNC_TIMEOUT_MS
                response = await self.client.sync(timeout=wait_ms, sync_filter=FILTER)
                if not isinstance(response, SyncResponse):
                    raise MatrixError.of(response)
            except asyncio.CancelledError:
                raise
            except (MatrixError, aiohttp.ClientError, TimeoutError, ValueError, OSError) as exc:
                failures += 1
                refused = isinstance(exc, MatrixError) and exc.code in PERMANENT
                lost = refused or failures >= GIVE_UP_AFTER
                self._state = f"{'lost' if lost else 'reconnecting'}: {_why(exc)}"
                if lost:
                    return
                await asyncio.sleep(wait)
                wait = min(wait * 2, RECONNECT_MAX_S)
                continue
            wait, failures = RECONNECT_FIRST_S, 0
            self._state = "connected"
            await self._keys()
            await self._on_sync(response, live=True)

    async def _on_sync(self, response: SyncResponse, *, live: bool) -> None:
        for room_id, info in response.rooms.invite.items():
            with self._one_event(room_id):
                await self._invited(room_id, [_stripped(e) for e in info.invite_state])
        for room_id, info in response.rooms.join.items():
            for event in info.timeline.events:
                raw = getattr(event, "source", None)
                if raw is None:
                    continue
                if raw.get("type") == "m.room.member":
                    self._note_direct(room_id, raw)
                elif live:
                    with self._one_event(room_id):
                        await self._on_event(room_id, raw)
                else:
                    self._unread.setdefault(room_id, []).append(raw)
            if live and info.timeline.limited:
                self._unseen_gap = True  # more came than one sync holds: catch up

    @contextlib.contextmanager
    def _one_event(self, room_id: str) -> Iterator[None]:
        """An event whose handling needs the homeserver (a join, a press read back) and
        fails on the way is logged and skipped: the sync loop goes on."""
        try:
            yield
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            logger.warning("matrix: an event in %s could not be handled: %s", room_id, _why(exc))

    async def _keys(self) -> None:
        """With encryption: upload this device's keys, learn the others', claim one-time
        keys and send the room keys waiting (what nio's sync_forever does after a sync)."""
        client = self.client
        if client.olm is None:
            return
        try:
            if client.should_upload_keys:
                await client.keys_upload()
            if client.should_query_keys:
                await client.keys_query()
            if client.should_claim_keys:
                await client.keys_claim(client.get_users_for_key_claiming())
            await client.send_to_device_messages()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:  # the next sync retries
            logger.warning("matrix: the encryption keys' exchange failed: %s", _why(exc))

    def _note_direct(self, room_id: str, raw: dict[str, Any]) -> None:
        content = raw.get("content") or {}
        if raw.get("state_key") == self.bot_id and content.get("is_direct"):
            self._direct.add(room_id)

    async def _invited(self, room_id: str, state: list[dict[str, Any]]) -> None:
        """Join when the config allows this invitation, else decline it."""
        own = next(
            (
                e
                for e in state
                if e.get("type") == "m.room.member" and e.get("state_key") == self.bot_id
            ),
            {},
        )
        inviter = str(own.get("sender") or "")
        direct = bool((own.get("content") or {}).get("is_direct"))
        allowed = (
            self._invites == "anyone"
            or inviter in self._allowed_users
            or room_id in self._allowed_chats
            or (self._invites == "direct" and direct)
        )
        if not allowed:
            logger.info("matrix: declined %s's invitation to %s (not allowed)", inviter, room_id)
            with contextlib.suppress(Exception):
                await self.client.room_leave(room_id)
            return
        joined = await self.client.join(room_id)
        if isinstance(joined, ErrorResponse):
            logger.warning("matrix: could not join %s: %s", room_id, joined.message)
        elif direct:
            self._direct.add(room_id)

    def _chat_type(self, room_id: str) -> ChatType:
        room = self.client.rooms.get(room_id)
        if room_id in self._direct or (room is not None and room.joined_count <= 2):
            return ChatType.DM
        return ChatType.GROUP

    async def _on_event(self, room_id: str, raw: dict[str, Any]) -> None:
        kind = raw.get("type")
        if raw.get("sender") == self.bot_id or self._sink is None:
            return
        if kind == "m.reaction":
            relates = _relation(raw.get("content") or {})
            if relates.get("rel_type") == "m.annotation":
                target, key = str(relates.get("event_id") or ""), str(relates.get("key") or "")
                await self._press(room_id, raw, target, key)
            return
        if kind == "m.room.encrypted":  # not decrypted: no keys for it (yet)
            await self._cannot_read(room_id)
            return
        event = to_event(raw, room_id, self._chat_type(room_id), self.bot_id, self.bot_name)
        if event is None:
            return
        number = NUMBER.match(event.text) if event.reply_to_id else None
        if number is not None and event.reply_to_id is not None:
            key = KEYS[int(number.group(1)) - 1]
            if await self._press(room_id, raw, event.reply_to_id, key):
                return
        await self._sink(event)

    async def _cannot_read(self, room_id: str) -> None:
        """Say once per room (and run) that its encrypted messages cannot be read."""
        if room_id in self._told_encrypted:
            return
        self._told_encrypted.add(room_id)
        if self.client.olm is not None:
            logger.warning("matrix: a message in %s could not be decrypted (no keys)", room_id)
            text = (
                "I could not decrypt a message here (my device was not given its keys). "
                "Could you send it again?"
            )
        else:
            logger.warning("matrix: %s is end-to-end encrypted: encryption is off", room_id)
            text = (
                "This room is end-to-end encrypted, and I am not set up to read encrypted "
                "messages. Please talk to me in a room without encryption."
            )
        content = {"msgtype": "m.notice", "body": text}
        with contextlib.suppress(Exception):
            await self.client.room_send(
                room_id, "m.room.message", content, ignore_unverified_devices=True
            )

    # -- buttons ---------------------------------------------------------------------------

    async def _buttons_of(self, room_id: str, message_id: str) -> list[dict[str, str]]:
        """The buttons of a message the bot sent (none for anyone else's)."""
        if message_id in self._buttons:
            return self._buttons[message_id]
        found = await self.client.room_get_event(room_id, message_id)
        if not isinstance(found, RoomGetEventResponse):
            return []
        raw = found.event.source
        if raw.get("sender") != self.bot_id:
            return []
        buttons = (raw.get("content") or {}).get(BUTTONS)
        return [b for b in buttons if isinstance(b, dict)] if isinstance(buttons, list) else []

    async def _press(self, room_id: str, raw: dict[str, Any], target: str, key: str) -> bool:
        """A reaction (or a reply with a number) to one of the bot's messages with
        buttons, as the press of the button with that key; False when it is none."""
        buttons = await self._buttons_of(room_id, target)
        command = next((b.get("command") for b in buttons if b.get("key") == key), None)
        if not command or self._sink is None:
            return False
        event_id = str(raw["event_id"])
        await self._sink(
            MessageEvent(
                platform="matrix",
                event_id=event_id,
                message_id=f"press:{event_id}",
                chat=ChatRef(room_id, self._chat_type(room_id)),
                user=UserRef(str(raw["sender"])),
                text=str(command),
                reply_to_id=target,
                mentioned=True,
                pressed=True,
            )
        )
        return True

    # -- catching up -------------------------------------------------------------------------

    async def missed(self, marks: list[ChatMark], most: int) -> list[MessageEvent]:
        """Each chat's messages after its mark (the mark's context gives the position
        after it; `/messages` reads forward from there), oldest first, at most `most`. A
        room that cannot be read any more is skipped."""
        found = self._never_read({m.chat.id for m in marks}, most)
        for mark in marks:
            context = await self.client.room_context(mark.chat.id, mark.message_id, limit=0)
            if not isinstance(context, RoomContextResponse) or not context.end:
                logger.info("matrix: cannot read %s from its mark: skipped", mark.chat.id)
                continue
            events: list[MessageEvent] = []
            position: str | None = context.end
            while position is not None and len(events) < most:
                page = await self.client.room_messages(
                    mark.chat.id,
                    position,
                    direction=MessageDirection.front,
                    limit=min(HISTORY_PAGE, most),
                )
                if not isinstance(page, RoomMessagesResponse):
                    raise MatrixError.of(page)
                for item in page.chunk:
                    raw = getattr(item, "source", None) or {}
                    event = to_event(raw, mark.chat.id, mark.chat.type, self.bot_id)
                    if event is not None:  # the stream's order is the truth, not clocks
                        events.append(event)
                position = page.end if page.chunk and page.end != position else None
            found.extend(events[:most])
        return found

    def _never_read(self, marked: set[str], most: int) -> list[MessageEvent]:
        """The first catch-up after a start also answers the rooms without a recent mark
        (a person's first message, sent while no gateway ran): their messages of the
        last CATCH_UP_WINDOW among the first sync's latest. A room read since then has a
        mark newer than those, so nothing is answered twice."""
        unread, self._unread = self._unread, {}
        if len(marked) >= MOST_MARKS:  # the marks may be cut short
            return []
        since = int((time.time() - CATCH_UP_WINDOW.total_seconds()) * 1000)
        found: list[MessageEvent] = []
        for room_id, events in unread.items():
            if room_id in marked:
                continue
            chat_type = self._chat_type(room_id)
            fresh = [
                event
                for raw in events
                if (event := to_event(raw, room_id, chat_type, self.bot_id, self.bot_name))
                and event.order >= since
            ]
            found.extend(fresh[-most:])
        return found

    # -- sending ---------------------------------------------------------------------------

    def _content(self, message: OutboundMessage) -> dict[str, Any]:
        """The message's content: its Markdown as the body, its HTML, its buttons (as a
        numbered line and in BUTTONS), and no pings (`m.mentions` empty)."""
        body = message.as_sent(str)
        buttons = [
            {"key": KEYS[n], "label": b.label, "command": b.command}
            for n, b in enumerate((message.buttons or ())[: len(KEYS)])
        ]
        if buttons:
            line = "  ".join(f"{b['key']} {b['label']}" for b in buttons)
            body = f"{body}\n\n{line}  (react, or reply with the number)"
        content: dict[str, Any] = {
            "msgtype": "m.text",
            "body": body,
            "format": "org.matrix.custom.html",
            "formatted_body": to_html(body),
            "m.mentions": {},
        }
        if buttons:
            content[BUTTONS] = buttons
        if len(str(content).encode("utf-8")) > EVENT_BYTES:
            del content["format"], content["formatted_body"]
        return content

    def _relates(self, message: OutboundMessage) -> dict[str, Any] | None:
        chat = message.chat
        if chat.thread_id:
            relates: dict[str, Any] = {
                "rel_type": "m.thread",
                "event_id": chat.thread_id,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": message.reply_to_id or chat.thread_id},
            }
            return relates
        if chat.type is not ChatType.DM and message.reply_to_id:
            return {"m.in_reply_to": {"event_id": message.reply_to_id}}
        return None

    async def _send_event(self, room_id: str, kind: str, content: dict[str, Any]) -> SendResult:
        try:
            sent = await self.client.room_send(  # encrypted where the room is (with keys)
                room_id, kind, content, tx_id=str(uuid.uuid4()), ignore_unverified_devices=True
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:  # it may be posted
            return SendResult(
                False, error=f"outcome unknown: {type(exc).__name__}: {exc}", outcome_unknown=True
            )
        except (LocalProtocolError, OlmTrustError, EncryptionError) as exc:  # never sent
            return SendResult(False, error=f"cannot encrypt for this room: {exc}")
        if not isinstance(sent, RoomSendResponse):
            return MatrixError.of(sent).result()
        return SendResult(True, (sent.event_id,))

    async def send(self, message: OutboundMessage) -> SendResult:
        content = self._content(message)
        relates = self._relates(message)
        if relates is not None:
            content["m.relates_to"] = relates
        result = await self._send_event(message.chat.id, "m.room.message", content)
        if result.ok and content.get(BUTTONS):
            await self._offer(message.chat.id, result.message_ids[0], content[BUTTONS])
        return result

    async def send_file(self, file: OutboundFile) -> SendResult:
        """The file uploaded to the content repository (encrypted first in an encrypted
        room: its keys go in the event, which is itself encrypted), then an `m.file`
        message with the caption as its body. An upload that fails posted nothing."""
        room = self.client.rooms.get(file.chat.id)
        encrypt = room is not None and room.encrypted
        if encrypt and self.client.olm is None:
            return SendResult(False, error="cannot encrypt for this room: encryption is off")
        try:
            uploaded, keys = await self.client.upload(
                io.BytesIO(file.data),
                content_type=file.mime,
                filename=file.name,
                encrypt=encrypt,
                filesize=len(file.data),
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}", retryable=True)
        if not isinstance(uploaded, UploadResponse):
            return MatrixError.of(uploaded).result()
        info = {"mimetype": file.mime, "size": len(file.data)}
        content: dict[str, Any] = {
            "msgtype": "m.file",
            "body": file.caption or file.name,  # a caption differs from the file name
            "filename": file.name,
            "info": info,
            "m.mentions": {},
        }
        if keys:
            content["file"] = {"url": uploaded.content_uri, "mimetype": file.mime, **keys}
        else:
            content["url"] = uploaded.content_uri
        if file.reply_to_id:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": file.reply_to_id}}
        return await self._send_event(file.chat.id, "m.room.message", content)

    async def _offer(self, room_id: str, message_id: str, buttons: list[dict[str, str]]) -> None:
        """Remember a message's buttons and put their keys under it to tap."""
        self._buttons[message_id] = buttons
        while len(self._buttons) > 1000:
            self._buttons.popitem(last=False)
        for button in buttons:
            relates = {"rel_type": "m.annotation", "event_id": message_id, "key": button["key"]}
            reacted = await self._send_event(room_id, "m.reaction", {"m.relates_to": relates})
            if reacted.ok:
                self._reactions.setdefault(message_id, []).extend(reacted.message_ids)
        for old in list(self._reactions)[: max(0, len(self._reactions) - 1000)]:
            del self._reactions[old]  # (dicts keep their order: the oldest go first)

    async def edit(self, chat: ChatRef, message_id: str, message: OutboundMessage) -> SendResult:
        """A replacement event (`m.replace`): clients show its `m.new_content`."""
        new = self._content(message)
        if message.buttons is None and message_id in self._buttons:  # unchanged: kept
            new[BUTTONS] = self._buttons[message_id]
        content = {
            "msgtype": "m.text",
            "body": f"* {new['body']}",
            "m.new_content": new,
            "m.relates_to": {"rel_type": "m.replace", "event_id": message_id},
            "m.mentions": {},
        }
        result = await self._send_event(chat.id, "m.room.message", content)
        if not result.ok:
            if result.outcome_unknown:  # an edit is safe to send again
                return SendResult(False, error=result.error, retryable=True)
            return result
        if message.buttons is not None and not message.buttons:
            self._buttons.pop(message_id, None)
            for reaction in self._reactions.pop(message_id, []):  # the keys go too
                await self._redact(chat.id, reaction)
        return SendResult(True, (message_id,))

    async def _redact(self, room_id: str, event_id: str) -> SendResult:
        try:
            done = await self.client.room_redact(room_id, event_id, tx_id=str(uuid.uuid4()))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}", retryable=True)
        if isinstance(done, ErrorResponse):
            return MatrixError.of(done).result()
        return SendResult(True, (event_id,))

    async def delete(self, chat: ChatRef, message_id: str) -> SendResult:
        return await self._redact(chat.id, message_id)

    async def typing(self, chat: ChatRef) -> None:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
            await self.client.room_typing(chat.id, True, timeout=15_000)

    async def direct_chat(self, platform_user_id: str) -> ChatRef | None:
        """A room of the bot and that person alone (a new direct chat when none)."""
        for room_id, room in self.client.rooms.items():
            if platform_user_id in room.users and room.joined_count <= 2:
                return ChatRef(room_id, ChatType.DM)
        try:
            made = await self.client.room_create(
                is_direct=True, invite=[platform_user_id], preset=RoomPreset.trusted_private_chat
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            logger.warning("matrix: cannot open a DM with %s: %s", platform_user_id, exc)
            return None
        if not isinstance(made, RoomCreateResponse):
            logger.warning("matrix: cannot open a DM with %s: %s", platform_user_id, made)
            return None
        self._direct.add(made.room_id)
        return ChatRef(made.room_id, ChatType.DM)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file from the content repository (authenticated media), with the bot's
        token, stopped past `max_bytes`."""
        if attachment.size is not None and attachment.size > max_bytes:
            raise DownloadError.too_big(attachment.size, max_bytes)
        encrypted = _encrypted_file(attachment.ref)
        mxc = str(encrypted["url"]) if encrypted is not None else attachment.ref
        url = self.homeserver + _media_path(mxc)
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {self._token}"},
                timeout=aiohttp.ClientTimeout(total=120, sock_connect=10),
            )
        try:
            async with self._http.get(url) as response:
                if response.status != 200:
                    raise DownloadError(f"Matrix answered HTTP {response.status} for the file.")
                data = await bounded(response.content.iter_chunked(64 * 1024), max_bytes)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DownloadError(f"The download failed ({type(exc).__name__}).") from None
        if encrypted is None:
            return data
        try:  # AES-CTR (the plaintext is as long as the ciphertext) and a SHA-256 of up
            # to the media limit: off the event loop, every other chat goes on meanwhile
            key, sha = encrypted["key"]["k"], encrypted["hashes"]["sha256"]
            plain = await asyncio.to_thread(decrypt_attachment, data, key, sha, encrypted["iv"])
            return bytes(plain)
        except (KeyError, TypeError, ValueError, EncryptionError) as exc:
            why = type(exc).__name__
            raise DownloadError(f"The file could not be decrypted ({why}).") from None


def _stripped(event: Any) -> dict[str, Any]:
    """An invitation's state event as the homeserver sent it (nio takes the content out
    of its `source` for these)."""
    return {
        "type": "m.room.member" if hasattr(event, "membership") else "",
        "state_key": getattr(event, "state_key", ""),
        "sender": getattr(event, "sender", ""),
        "content": getattr(event, "content", None) or {},
    }


def _encrypted_file(ref: str) -> dict[str, Any] | None:
    """An encrypted file's `file` object, from its attachment's ref (None: plain)."""
    if not ref.startswith(ENCRYPTED):
        return None
    try:
        found = json.loads(ref.removeprefix(ENCRYPTED))
    except ValueError:
        raise DownloadError("Matrix gave a file address I cannot read.") from None
    if not isinstance(found, dict):
        raise DownloadError("Matrix gave a file address I cannot read.")
    return found


def _why(exc: Exception) -> str:
    return str(exc) if isinstance(exc, MatrixError) else type(exc).__name__


class MatrixError(Exception):
    """A refusal of the homeserver: its `errcode`, HTTP status and asked wait."""

    def __init__(
        self, message: str, code: str = "", status: int = 0, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.status, self.retry_after = code, status, retry_after

    @classmethod
    def of(cls, response: Any) -> MatrixError:
        transport = getattr(response, "transport_response", None)
        status = int(getattr(transport, "status", 0) or 0)
        code = str(getattr(response, "status_code", "") or "")
        message = str(getattr(response, "message", "") or f"HTTP {status}")
        wait = getattr(response, "retry_after_ms", None)
        retry = wait / 1000 if isinstance(wait, int | float) else None
        if retry is None and transport is not None and status == 429:
            with contextlib.suppress(TypeError, ValueError):
                retry = float(transport.headers.get("Retry-After"))
        return cls(f"{code or status}: {message}", code, status, retry)

    def result(self) -> SendResult:
        if self.status == 429 or self.code == "M_LIMIT_EXCEEDED":
            return SendResult(
                False, error="rate limited", retryable=True, retry_after=self.retry_after or 1.0
            )
        transient = self.status >= 500 and self.code not in PERMANENT
        return SendResult(False, error=str(self), retryable=transient)


__all__ = ["MatrixAdapter", "MatrixError", "mentioned", "to_event"]
