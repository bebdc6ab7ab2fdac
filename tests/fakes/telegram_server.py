"""A local Telegram Bot API server: the real python-telegram-bot talks to it over HTTP.

Implements getMe, deleteWebhook, getUpdates (long poll with offset), sendMessage
(returns a full Message), editMessageText and deleteMessage (on the bot's messages, with
Telegram's "message is not modified" and "message to edit not found" errors),
sendChatAction, setMyCommands, close, sendDocument (multipart/form-data, as
python-telegram-bot uploads: the file kept in `documents`); records every call;
`messages` holds what each of the bot's messages shows now;
injects 429 (with parameters.retry_after), 5xx, entity-parsing errors, dropped
connections and duplicate update deliveries.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs

from tests.fakes.balancer import Pusher
from tests.fakes.http_base import FormPart, JsonHandler, ThreadedHttp, form_data

BOT = {"id": 999, "is_bot": True, "first_name": "Hermes", "username": "hermes_test_bot"}


@dataclass
class Fault:
    method: str
    status: int = 400
    description: str = "Bad Request"
    retry_after: int | None = None
    drop: bool = False


@dataclass
class FakeTelegram:
    updates: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    faults: deque[Fault] = field(default_factory=deque)
    next_update_id: int = 1
    next_message_id: int = 1000
    messages: dict[tuple[int, int], str] = field(default_factory=dict)  # the bot's, as shown
    timeline: list[tuple[str, float]] = field(default_factory=list)  # (method, monotonic)
    posts: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # chat, id, params
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # file_id: (path, data)
    downloads: list[str] = field(default_factory=list)  # file paths fetched
    broken_downloads: set[str] = field(default_factory=set)  # file paths answered with 500
    pusher: Pusher | None = None  # webhook mode: set by setWebhook
    # files the bot sent (sendDocument): chat_id, file name, MIME type, bytes, caption
    documents: list[tuple[int, str, str, bytes, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._http = ThreadedHttp(self._handler())

    @property
    def base_url(self) -> str:
        return self._http.root

    def start(self) -> FakeTelegram:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    # -- what users do -------------------------------------------------------------------

    def user_message(
        self,
        text: str,
        *,
        user_id: int = 42,
        chat_id: int | None = None,
        chat_type: str = "private",
        entities: list[dict[str, Any]] | None = None,
        reply_to_bot: bool = False,
        thread_id: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        chat = chat_id if chat_id is not None else user_id
        message: dict[str, Any] = {
            "message_id": self._message_id(),
            "date": int(time.time()),
            "chat": {"id": chat, "type": chat_type, "title": "group"}
            if chat_type != "private"
            else {"id": chat, "type": "private", "first_name": f"User{user_id}"},
            "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"},
            "text": text,
        }
        if entities:
            message["entities"] = entities
        if text.startswith("/"):
            message["entities"] = [
                {"type": "bot_command", "offset": 0, "length": len(text.split(maxsplit=1)[0])}
            ]
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": 1,
                "date": int(time.time()),
                "chat": message["chat"],
                "from": BOT,
                "text": "earlier",
            }
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if extra:
            message.update(extra)
            media = ("photo", "sticker", "voice", "audio", "document", "video", "animation")
            if "text" not in extra and any(key in extra for key in media):
                message.pop("text", None)  # a file's words are its caption
        return self.push({"message": message})

    def press(
        self, chat_id: int, message_id: int, data: str, *, user_id: int = 42
    ) -> dict[str, Any]:
        """A press of an inline button under the bot's message `message_id`."""
        with self._cond:
            text = self.messages.get((chat_id, message_id), "")
        query = {
            "id": f"cq{self._message_id()}",
            "from": {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"},
            "message": self._bot_message(chat_id, message_id, text),
            "chat_instance": f"ci{chat_id}",
            "data": data,
        }
        return self.push({"callback_query": query})

    def keyboard(self, params: dict[str, Any]) -> list[tuple[str, str]]:
        """The inline buttons a sendMessage / editMessageText call carried: (text, data)."""
        markup = params.get("reply_markup") or {}
        if isinstance(markup, str):
            markup = json.loads(markup)
        rows = markup.get("inline_keyboard") or []
        return [(b["text"], b.get("callback_data", "")) for row in rows for b in row]

    def add_file(self, data: bytes, path: str, *, size: int | None = None) -> dict[str, Any]:
        """A file users can send: its Bot API object (file_id, file_size) for a message."""
        file_id = f"F{len(self.files) + 1}x{path.replace('/', '_')}"
        with self._cond:
            self.files[file_id] = (path, data)
        return {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_size": len(data) if size is None else size,
        }

    def push(self, update: dict[str, Any]) -> dict[str, Any]:
        """A new update: fetched by getUpdates, or, once setWebhook named a URL, POSTed
        there as Telegram does (each chat's in order, retried until answered 2xx)."""
        with self._cond:
            update = {"update_id": self.next_update_id, **update}
            self.next_update_id += 1
            pusher = self.pusher
            if pusher is None:
                self.updates.append(update)
            self._cond.notify_all()
        if pusher is not None:
            found = update.get("message") or (update.get("callback_query") or {}).get("message")
            chat = str(((found or {}).get("chat") or {}).get("id", ""))
            pusher.deliver(chat, json.dumps(update).encode())
        return update

    def redeliver(self, update: dict[str, Any]) -> None:
        with self._cond:
            self.updates.append(update)  # the same update_id again
            self._cond.notify_all()

    def sent(self, method: str = "sendMessage") -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]

    def wait_sent(self, count: int, timeout: float = 20) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while len(self.sent()) < count:
            assert time.monotonic() < deadline, f"only {len(self.sent())} of {count} messages sent"
            time.sleep(0.02)
        return self.sent()

    def _message_id(self) -> int:
        self.next_message_id += 1
        return self.next_message_id

    # -- the Bot API -----------------------------------------------------------------------

    def _call(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        with self._cond:
            self.calls.append((method, params))
            self.timeline.append((method, time.monotonic()))
            fault = next((f for f in self.faults if f.method == method), None)
            if fault:
                self.faults.remove(fault)
        if fault:
            if fault.drop:
                return None
            body: dict[str, Any] = {
                "ok": False,
                "error_code": fault.status,
                "description": fault.description,
            }
            if fault.retry_after is not None:
                body["parameters"] = {"retry_after": fault.retry_after}
            return fault.status, body
        if method in ("editMessageText", "deleteMessage"):
            return self._edit(method, params)
        if method == "getFile":
            stored = self.files.get(str(params.get("file_id")))
            if stored is None:
                return 400, {
                    "ok": False,
                    "error_code": 400,
                    "description": "Bad Request: invalid file_id",
                }
            file_id, (path, data) = str(params["file_id"]), stored
            result = {
                "file_id": file_id,
                "file_unique_id": f"u{file_id}",
                "file_size": len(data),
                "file_path": path,
            }
            return 200, {"ok": True, "result": result}
        return 200, {"ok": True, "result": self._result(method, params)}

    def _result(self, method: str, params: dict[str, Any]) -> Any:
        if method == "getMe":
            return {
                **BOT,
                "can_join_groups": True,
                "can_read_all_group_messages": False,
                "supports_inline_queries": False,
            }
        if method == "getUpdates":
            return self._get_updates(params)
        if method == "setWebhook":
            secret = str(params.get("secret_token", ""))
            with self._cond:
                self.pusher = Pusher(
                    str(params["url"]),
                    lambda _body: {
                        "Content-Type": "application/json",
                        "X-Telegram-Bot-Api-Secret-Token": secret,
                    },
                )
            return True
        if method == "sendMessage":
            chat_id = int(params["chat_id"])
            message_id = self._message_id()
            with self._cond:
                self.messages[(chat_id, message_id)] = str(params.get("text", ""))
                self.posts.append((chat_id, message_id, params))
            return self._bot_message(chat_id, message_id, str(params.get("text", "")))
        if method == "sendDocument":
            return self._document(params)
        return True

    def _document(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id, upload = int(params["chat_id"]), params["document"]
        if not isinstance(upload, FormPart) or upload.filename is None:
            raise ValueError("sendDocument: the document is not an uploaded file")
        name, mime = upload.filename, upload.content_type or "application/octet-stream"
        caption = str(params.get("caption", ""))
        message_id = self._message_id()
        with self._cond:
            self.messages[(chat_id, message_id)] = caption
            self.documents.append((chat_id, name, mime, upload.data, caption))
        message = self._bot_message(chat_id, message_id, "")
        del message["text"]
        message["document"] = {
            "file_id": f"D{message_id}",
            "file_unique_id": f"uD{message_id}",
            "file_name": name,
            "mime_type": mime,
            "file_size": len(upload.data),
        }
        if caption:
            message["caption"] = caption
        return message

    def _bot_message(self, chat_id: int, message_id: int, text: str) -> dict[str, Any]:
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": BOT,
            "text": text,
        }

    def _edit(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """editMessageText / deleteMessage on the bot's own messages, as Telegram answers."""
        key = (int(params["chat_id"]), int(params["message_id"]))
        with self._cond:
            current = self.messages.get(key)
            if current is None:
                what = (
                    "message to edit not found"
                    if method == "editMessageText"
                    else ("message to delete not found")
                )
                return 400, {"ok": False, "error_code": 400, "description": f"Bad Request: {what}"}
            if method == "deleteMessage":
                del self.messages[key]
                return 200, {"ok": True, "result": True}
            text = str(params.get("text", ""))
            if text == current:
                description = (
                    "Bad Request: message is not modified: specified new message content and "
                    "reply markup are exactly the same as a current content and reply markup "
                    "of the message"
                )
                return 400, {"ok": False, "error_code": 400, "description": description}
            self.messages[key] = text
        return 200, {"ok": True, "result": {**self._bot_message(*key, text), "edit_date": 1}}

    def shown(self, chat_id: int) -> list[str]:
        """What the bot's messages in `chat_id` show now, oldest first."""
        with self._cond:
            return [text for (chat, _), text in sorted(self.messages.items()) if chat == chat_id]

    def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        wait = min(float(params.get("timeout") or 0), 1.0)
        deadline = time.monotonic() + wait
        with self._cond:
            while True:
                pending = [u for u in self.updates if u["update_id"] >= offset]
                if pending or time.monotonic() >= deadline:
                    # what is confirmed by the offset is forgotten, as Telegram does
                    self.updates = pending
                    return pending
                self._cond.wait(max(0.0, deadline - time.monotonic()))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:  # noqa: N802 - file downloads: /file/bot<token>/<path>
                path = self.path.split("/", 3)[-1] if self.path.startswith("/file/bot") else ""
                with fake._cond:
                    fake.downloads.append(path)
                    found = next((d for p, d in fake.files.values() if p == path), None)
                if path in fake.broken_downloads:
                    self.send_raw(500, b"broken")
                elif found is None:
                    self.send_raw(404, b"not found")
                else:
                    self.send_raw(200, found, {"Content-Type": "application/octet-stream"})

            def do_POST(self) -> None:  # noqa: N802 - http.server calls it by this name
                method = self.path.rsplit("/", 1)[-1]
                kind = self.headers.get("Content-Type", "")
                if kind.startswith("multipart/form-data"):  # an upload: its files as parts
                    form = form_data(self.body(), kind)
                    params: dict[str, Any] = {
                        k: part if part.filename is not None else _value(part.text)
                        for k, part in form.items()
                    }
                else:
                    params = _decode(self.body().decode(), kind)
                answer = fake._call(method, params)
                if answer is None:
                    self.drop()
                    return
                self.send_json(*answer)

        return Handler


def _decode(raw: str, content_type: str) -> dict[str, Any]:
    if "json" in content_type:
        return dict(json.loads(raw or "{}"))
    return {key: _value(values[0]) for key, values in parse_qs(raw, keep_blank_values=True).items()}


def _value(value: str) -> Any:
    """A form field's value as the Bot API reads it (JSON where it parses)."""
    try:
        return json.loads(value)
    except ValueError:
        return value
