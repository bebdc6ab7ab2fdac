"""Telegram through python-telegram-bot 22, embedded by its lifecycle calls.

`to_event` is pure over the Bot API's JSON update; `TelegramAdapter` owns the SDK:
`initialize/start` + `updater.start_polling` (PTB retries polling errors itself), bot
commands registered with setMyCommands, replies as Telegram HTML with a plain-text
fallback when Telegram rejects the entities.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, TypeVar

import httpx
from aiohttp import web
from telegram import (
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError, TimedOut
from telegram.ext import (
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    ContextTypes,
    MessageHandler,
    filters,
)
from telegram.request import HTTPXRequest

from adapters.telegram.render import to_telegram_html
from gateway.edge.chunking import utf16_length
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
from gateway.edge.ports import Capabilities, DownloadError, EventSink, MenuEntry

logger = logging.getLogger(__name__)
T = TypeVar("T")

SEND_CONNECTIONS = 8
BOT_DOWNLOAD_LIMIT = 20 * 1000 * 1000  # getFile serves files up to 20 MB
BOT_UPLOAD_LIMIT = 50 * 1000 * 1000  # sendDocument takes files up to 50 MB
POOL_TIMEOUT_S = 30.0  # waiting for a free connection is not a failure
FINISH_IN_FLIGHT_S = 5.0  # at a stop, requests already sent get this long to end
SENDS_LOST_AFTER_S = 120.0  # every send failing this long: the platform is restarted
_CHAT_TYPES = {
    "private": ChatType.DM,
    "group": ChatType.GROUP,
    "supergroup": ChatType.GROUP,
    "channel": ChatType.CHANNEL,
}
_ATTACHMENTS = (
    "photo",
    "sticker",
    "voice",
    "audio",
    "video",
    "video_note",
    "document",
    "animation",
)


def to_event(update: dict[str, Any], bot_id: int, bot_username: str) -> MessageEvent | None:
    """A MessageEvent from a raw update, or None when it is not a message for us."""
    message = update.get("message")
    if not message or "chat" not in message:
        return None  # edits, channel posts, callbacks: not conversation turns
    sender = message.get("from") or {}
    text = message.get("text") or message.get("caption") or ""
    entities = message.get("entities") or message.get("caption_entities") or []
    text, for_other_bot = _strip_bot_suffix(text, entities, bot_username)
    if for_other_bot:
        return None
    chat = message["chat"]
    thread = str(message["message_thread_id"]) if message.get("is_topic_message") else None
    reply = message.get("reply_to_message") or {}
    name = " ".join(p for p in (sender.get("first_name"), sender.get("last_name")) if p)
    return MessageEvent(
        platform="telegram",
        event_id=str(update["update_id"]),
        message_id=f"{chat['id']}:{message['message_id']}",
        chat=ChatRef(
            str(chat["id"]), _CHAT_TYPES.get(chat.get("type", ""), ChatType.GROUP), thread
        ),
        user=UserRef(
            str(sender.get("id", "")),
            name or sender.get("username", ""),
            bool(sender.get("is_bot")),
        ),
        text=text,
        reply_to_id=f"{chat['id']}:{reply['message_id']}" if reply else None,
        mentioned=_mentions(text, entities, bot_username),
        replied_to_bot=(reply.get("from") or {}).get("id") == bot_id,
        attachments=tuple(_attachment(k, message[k]) for k in _ATTACHMENTS if message.get(k)),
        sent_at=float(message["date"]) if isinstance(message.get("date"), int) else None,
        order=int(message["message_id"]),  # grows within a chat; `date` is whole seconds
        raw=update,
    )


def press_event(update: dict[str, Any]) -> MessageEvent | None:
    """A callback query (a press of one of our inline buttons) as a pressed event."""
    query = update.get("callback_query") or {}
    message, sender = query.get("message") or {}, query.get("from") or {}
    chat = message.get("chat") or {}
    if not query.get("id") or not sender.get("id") or not chat.get("id"):
        return None
    name = " ".join(p for p in (sender.get("first_name"), sender.get("last_name")) if p)
    return MessageEvent(
        platform="telegram",
        event_id=str(update.get("update_id", query["id"])),
        message_id=f"press:{query['id']}",
        chat=ChatRef(str(chat["id"]), _CHAT_TYPES.get(chat.get("type", ""), ChatType.GROUP)),
        user=UserRef(
            str(sender["id"]), name or sender.get("username", ""), bool(sender.get("is_bot"))
        ),
        text=str(query.get("data") or ""),
        reply_to_id=f"{chat['id']}:{message.get('message_id')}",
        mentioned=True,  # pressed on our message: addressed to us
        pressed=True,
        raw=update,
    )


def _keyboard(buttons: tuple[Button, ...] | None) -> InlineKeyboardMarkup | None:
    if not buttons:
        return None
    row = [InlineKeyboardButton(b.label, callback_data=b.command[:64]) for b in buttons]
    return InlineKeyboardMarkup([row])


def _strip_bot_suffix(text: str, entities: list[dict[str, Any]], bot: str) -> tuple[str, bool]:
    """'/new@hermes_bot x' -> '/new x'; a command addressed to another bot is not ours."""
    for entity in entities:
        if entity.get("type") == "bot_command" and entity.get("offset") == 0:
            command = text[: entity["length"]]
            name, _, target = command.partition("@")
            if target and target.lower() != bot.lower():
                return text, True
            return name + text[entity["length"] :], False
    return text, False


def _mentions(text: str, entities: list[dict[str, Any]], bot: str) -> bool:
    for entity in entities:
        if entity.get("type") == "mention":
            mention = text[entity["offset"] : entity["offset"] + entity["length"]]
            if mention.lstrip("@").lower() == bot.lower():
                return True
    return f"@{bot.lower()}" in text.lower()


def _kind(key: str) -> Any:
    return {"video_note": "video", "animation": "video"}.get(key, key)


_DEFAULT_NAMES = {"photo": "photo.jpg", "voice": "voice.ogg", "audio": "audio", "video": "video"}


def _attachment(key: str, value: Any) -> Attachment:
    """One attachment of a message (a photo is a list of sizes: the largest is taken)."""
    item = value[-1] if isinstance(value, list) and value else value
    item = item if isinstance(item, dict) else {}
    kind = _kind(key)
    mime = str(item.get("mime_type") or ("image/jpeg" if key == "photo" else ""))
    duration = item.get("duration")
    return Attachment(
        kind,
        name=str(item.get("file_name") or _DEFAULT_NAMES.get(kind, key)),
        mime=mime,
        size=item.get("file_size") if isinstance(item.get("file_size"), int) else None,
        ref=str(item.get("file_id") or ""),
        duration=float(duration) if isinstance(duration, int | float) else None,
    )


@dataclass(frozen=True, slots=True)
class Webhook:
    public_url: str  # where Telegram reaches the gateway's HTTP server
    secret: str  # checked against X-Telegram-Bot-Api-Secret-Token on every push
    path: str = "/telegram/webhook"
    # setWebhook at start: one instance of several does it (the leader); the URL is the
    # load balancer's, the same for all
    announce: bool = True


class _WatchedPolling(HTTPXRequest):
    """The getUpdates connection, reporting each poll's outcome to the adapter: PTB
    retries failed polls by itself and says nothing when one succeeds again."""

    def __init__(self, report: Callable[[int | None, str], None]) -> None:
        super().__init__()
        self._report = report

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        try:
            code, body = await super().do_request(*args, **kwargs)
        except TelegramError as exc:  # no answer (a connection error, a timeout)
            self._report(None, f"{type(exc).__name__}: {exc}")
            raise
        self._report(code, "")
        return code, body


class _UnbrokenRequest(HTTPXRequest):
    """The send pool's requests, each carried to its end even when its caller is
    cancelled (a finished turn's "typing", a stream stopped, a stop).

    httpcore loses the pool connection of a request cancelled in its first moments: after
    eight such cancels (the pool's size) every Bot API call waits for a connection that
    never comes back. A request already on its way costs nothing to finish; the caller
    still returns at once.
    """

    def __init__(self) -> None:
        super().__init__(connection_pool_size=SEND_CONNECTIONS, pool_timeout=POOL_TIMEOUT_S)
        self._in_flight: set[asyncio.Future[tuple[int, bytes]]] = set()

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        request = asyncio.ensure_future(super().do_request(*args, **kwargs))
        self._in_flight.add(request)
        request.add_done_callback(_settled)
        request.add_done_callback(self._in_flight.discard)
        return await asyncio.shield(request)

    async def shutdown(self) -> None:
        """Requests still on their way end first (bounded), then the pool closes."""
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=FINISH_IN_FLIGHT_S)
        await super().shutdown()


def _settled(request: asyncio.Future[Any]) -> None:
    """A request nobody awaits any more: its failure is its caller's no longer."""
    if not request.cancelled():
        request.exception()


class TelegramAdapter:
    name = "telegram"
    # 4,096 UTF-16 units per message, counted on the HTML that is sent
    # edits: about one per second in a chat, 20 messages a minute in a group
    capabilities = Capabilities(
        max_length=4096,
        length=utf16_length,
        render=to_telegram_html,
        edit_interval_s=1.0,
        group_edit_interval_s=3.0,
        max_file_bytes=BOT_UPLOAD_LIMIT,
    )

    def __init__(
        self,
        token: str,
        base_url: str | None = None,
        poll_timeout: int = 10,
        webhook: Webhook | None = None,
        menu: Sequence[MenuEntry] = (),
    ) -> None:
        # SEND_CONNECTIONS: httpx scans its whole pool on every request, so PTB's default
        # of 256 costs more CPU than it saves waiting (bench/gateway_throughput.py)
        builder = ApplicationBuilder().token(token).request(_UnbrokenRequest())
        builder = builder.get_updates_request(_WatchedPolling(self._polled))
        if base_url:
            root = base_url.rstrip("/")
            builder = builder.base_url(f"{root}/bot").base_file_url(f"{root}/file/bot")
        self.app: Application[Any, Any, Any, Any, Any, Any] = builder.build()
        self.poll_timeout = poll_timeout
        self.webhook = webhook
        self.menu = [BotCommand(entry.name, entry.summary[:256]) for entry in menu]
        self._sink: EventSink | None = None
        self._poll_trouble = ""  # why the last poll failed; empty once one succeeds
        # why the last send failed in transit, and since when sends fail; cleared by a success
        self._send_trouble, self._sends_failing_since = "", 0.0
        self._token_refused = False
        self.app.add_handler(MessageHandler(filters.ALL, self._on_update))
        self.app.add_handler(CallbackQueryHandler(self._on_press))

    async def start(self, sink: EventSink) -> None:
        self._sink = sink
        self._poll_trouble, self._token_refused = "", False  # a webhook adapter starts again
        await self.app.initialize()  # getMe
        if self.menu:
            await self.app.bot.set_my_commands(self.menu)
        await self.app.start()
        if self.webhook is not None:  # Telegram pushes to routes() on the gateway's server
            if self.webhook.announce:
                url = self.webhook.public_url.rstrip("/") + self.webhook.path
                await self.app.bot.set_webhook(
                    url,
                    secret_token=self.webhook.secret,
                    allowed_updates=["message", "callback_query"],
                )
            return
        assert self.app.updater is not None
        await self.app.updater.start_polling(
            timeout=self.poll_timeout, error_callback=self._polling_error
        )

    def routes(self) -> list[Route]:
        if self.webhook is None:
            return []
        return [Route("POST", self.webhook.path, self._on_webhook)]

    async def _on_webhook(self, request: web.Request) -> web.Response:
        assert self.webhook is not None
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given, self.webhook.secret):
            return web.Response(status=403, text="wrong secret token")
        try:
            data = await request.json()
            update = Update.de_json(data, self.app.bot)
        except (ValueError, TypeError, KeyError):
            return web.Response(status=400, text="not a Telegram update")
        if update is None:
            return web.Response(status=200)
        try:  # taken (recorded, queued) before Telegram hears 200: it never redelivers then
            await self._take(update)
        except Exception:
            logger.exception("a pushed Telegram update could not be taken; Telegram retries it")
            return web.Response(status=503, text="try again", headers={"Retry-After": "1"})
        return web.Response(status=200)

    async def stop_intake(self) -> None:
        """Polling stops; updates not fetched yet stay unconfirmed at Telegram (webhook
        pushes are refused with 503 by the gateway's server, so Telegram retries them)."""
        if self.app.updater is not None and self.app.updater.running:
            try:
                await self.app.updater.stop()
            except TelegramError as exc:  # how the polling loop ended (a refused token)
                logger.info("telegram polling had ended: %s", exc)

    async def stop(self) -> None:
        await self.stop_intake()
        if self.app.running:
            await self.app.stop()
        await self.app.shutdown()
        # a start whose getMe failed left the application uninitialized (its shutdown
        # does nothing) but the bot's connection pools open: each retry leaked them
        await self.app.bot.shutdown()

    async def whoami(self) -> str:
        async with self.app.bot as bot:  # initialize() is the getMe call
            return f"@{bot.username} ({bot.id})"

    async def connection(self) -> str:
        if self._token_refused:  # PTB ends its polling loop for good on 401 and 404
            return "lost: Telegram refused the bot token (it was revoked or is wrong)"
        if self._poll_trouble:
            return f"reconnecting: {self._poll_trouble}"
        if self._send_trouble:  # polling has its own connection: it can be fine meanwhile
            failing = time.monotonic() - self._sends_failing_since
            if failing >= SENDS_LOST_AFTER_S:  # a restart makes a fresh connection pool
                return f"lost: every send failed for {failing:.0f} s ({self._send_trouble})"
            return f"reconnecting: sends are failing ({self._send_trouble})"
        return "connected"

    def _sent(self, result: SendResult) -> SendResult:
        """Note how a send went: a failure in transit (not an answer from Telegram, nor
        its 429) means the platform cannot be reached, whatever polling says."""
        if result.ok:
            self._send_trouble = ""
        elif result.outcome_unknown or (result.retryable and result.retry_after is None):
            if not self._send_trouble:
                self._sends_failing_since = time.monotonic()
            self._send_trouble = result.error or "failed"
        return result

    def _polled(self, status: int | None, trouble: str) -> None:
        if status == 200:
            self._poll_trouble = ""
        elif status in (401, 404):
            self._token_refused = True
        elif status is not None:
            self._poll_trouble = f"getUpdates answered HTTP {status}"
        else:
            self._poll_trouble = trouble

    def _polling_error(self, error: TelegramError) -> None:
        """PTB's word on a failed poll, after the transport's (`_polled`, which saw the
        answer first): the reason shown stays the transport's, one source."""
        if not self._poll_trouble:
            self._poll_trouble = f"{type(error).__name__}: {error}"
        logger.warning("telegram polling error (retrying): %s", error)

    async def _on_update(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        await self._take(update)

    async def _on_press(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        await self._take(update)

    async def _take(self, update: Update) -> None:
        """A polled or pushed update into the sink: a button press (its spinner stopped
        at once) or a message."""
        if update.callback_query is not None:
            with contextlib.suppress(TelegramError):
                await update.callback_query.answer()
            event = press_event(update.to_dict())
        else:
            bot = self.app.bot
            event = to_event(update.to_dict(), bot.id, bot.username or "")
        if event is not None and self._sink is not None:
            await self._sink(event)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """getFile, then the file itself (bots may fetch files up to 20 MB)."""
        limit = min(max_bytes, BOT_DOWNLOAD_LIMIT)
        if attachment.size is not None and attachment.size > limit:
            raise DownloadError.too_big(attachment.size, limit)
        if not attachment.ref:
            raise DownloadError("Telegram did not say where the file is.")
        try:
            file = await self.app.bot.get_file(attachment.ref)
            if file.file_size is not None and file.file_size > limit:
                raise DownloadError.too_big(file.file_size, limit)
            data = bytes(await file.download_as_bytearray())
        except TelegramError as exc:
            raise DownloadError(f"Telegram would not hand me the file ({exc}).") from None
        except httpx.HTTPError as exc:
            raise DownloadError(f"The download failed ({type(exc).__name__}).") from None
        if len(data) > limit:
            raise DownloadError.too_big(len(data), limit)
        return data

    async def direct_chat(self, platform_user_id: str) -> ChatRef | None:
        """A private chat's id is the user's id (reachable once they started the bot)."""
        return ChatRef(platform_user_id, ChatType.DM) if platform_user_id.isdigit() else None

    async def typing(self, chat: ChatRef) -> None:
        thread = int(chat.thread_id) if chat.thread_id else None
        await self.app.bot.send_chat_action(
            int(chat.id), ChatAction.TYPING, message_thread_id=thread
        )

    async def send(self, message: OutboundMessage) -> SendResult:
        try:
            return await self._send(message, message.as_sent(to_telegram_html), ParseMode.HTML)
        except BadRequest as exc:
            if "parse" not in str(exc).lower():  # descriptions are rewritten: compare loosely
                return SendResult(False, error=f"rejected: {exc}")
        try:  # Telegram could not parse our HTML: the same text, plain
            return await self._send(message, message.text, None)
        except BadRequest as exc:
            return SendResult(False, error=f"rejected: {exc}")

    async def _send(self, message: OutboundMessage, text: str, mode: str | None) -> SendResult:
        chat = message.chat
        sent = await _outcome(
            self.app.bot.send_message(
                int(chat.id),
                text,
                parse_mode=mode,
                reply_parameters=_reply(message.reply_to_id),
                message_thread_id=int(chat.thread_id) if chat.thread_id else None,
                reply_markup=_keyboard(message.buttons),
            )
        )
        if isinstance(sent, SendResult):
            return self._sent(sent)
        return self._sent(SendResult(True, (f"{chat.id}:{sent.message_id}",)))

    async def send_file(self, file: OutboundFile) -> SendResult:
        """sendDocument (multipart), the caption as plain text."""
        chat = file.chat
        try:
            sent = await _outcome(
                self.app.bot.send_document(
                    int(chat.id),
                    InputFile(file.data, filename=file.name),
                    caption=file.caption or None,
                    reply_parameters=_reply(file.reply_to_id),
                    message_thread_id=int(chat.thread_id) if chat.thread_id else None,
                    disable_content_type_detection=True,
                )
            )
        except BadRequest as exc:
            return SendResult(False, error=f"rejected: {exc}")
        if isinstance(sent, SendResult):
            return self._sent(sent)
        return self._sent(SendResult(True, (f"{chat.id}:{sent.message_id}",)))

    async def edit(self, chat: ChatRef, message_id: str, message: OutboundMessage) -> SendResult:
        """editMessageText, as HTML (plain when Telegram cannot parse it); an edit to the
        text the message already has ("message is not modified") is success."""
        number = int(message_id.rsplit(":", 1)[-1])
        attempts: list[tuple[str, str | None]] = [
            (message.as_sent(to_telegram_html), ParseMode.HTML),
            (message.text, None),
        ]
        result = SendResult(False, error="not edited")
        for text, mode in attempts:
            try:
                done = await _outcome(
                    self.app.bot.edit_message_text(
                        text,
                        int(chat.id),
                        number,
                        parse_mode=mode,
                        reply_markup=_keyboard(message.buttons),  # none: the buttons go
                    )
                )
            except BadRequest as exc:
                if "not modified" in str(exc).lower():
                    return SendResult(True, (message_id,))
                result = SendResult(False, error=f"rejected: {exc}")
                if "parse" in str(exc).lower():
                    continue  # the same text, plain
                return result
            if isinstance(done, SendResult):  # an edit is safe to make again, whatever
                self._sent(done)
                return replace(done, retryable=not (done.error or "").startswith("forbidden"))
            return self._sent(SendResult(True, (message_id,)))
        return result

    async def delete(self, chat: ChatRef, message_id: str) -> SendResult:
        number = int(message_id.rsplit(":", 1)[-1])
        try:
            done = await _outcome(self.app.bot.delete_message(int(chat.id), number))
        except BadRequest as exc:
            return SendResult(False, error=f"rejected: {exc}")
        return done if isinstance(done, SendResult) else SendResult(True, (message_id,))


def _reply(reply_to_id: str | None) -> ReplyParameters | None:
    if not reply_to_id:
        return None
    return ReplyParameters(int(reply_to_id.rsplit(":", 1)[-1]), allow_sending_without_reply=True)


async def _outcome(call: Awaitable[T]) -> T | SendResult:
    """The Bot API call's result, or the SendResult its failure means (BadRequest is
    raised: what it means depends on the call)."""
    try:
        return await call
    except RetryAfter as exc:
        wait = exc.retry_after
        seconds = wait.total_seconds() if isinstance(wait, timedelta) else float(wait)
        return SendResult(False, error="rate limited", retryable=True, retry_after=seconds)
    except Forbidden as exc:
        return SendResult(False, error=f"forbidden: {exc}")  # blocked by the user
    except TimedOut as exc:
        if isinstance(exc.__cause__, httpx.PoolTimeout | httpx.ConnectTimeout):  # not sent
            return SendResult(False, error=f"not sent: {exc}", retryable=True)
        # it may have been posted: resending could duplicate
        return SendResult(False, error=f"timed out, outcome unknown: {exc}", outcome_unknown=True)
    except NetworkError as exc:
        if isinstance(exc, BadRequest):
            raise
        return _network_failure(exc)


def _network_failure(exc: NetworkError) -> SendResult:
    """Tell an answered error from an unknown outcome.

    PTB raises NetworkError both for an HTTP error status (5xx: Telegram answered, the
    message was not posted, so sending again is safe) and, chained to the httpx error,
    for a transport failure. Of those, only a refused connection surely posted nothing;
    a connection dropped mid-request may have been processed, so it is not resent.
    """
    cause = exc.__cause__
    if cause is None:
        return SendResult(False, error=f"server error: {exc}", retryable=True)
    if isinstance(cause, httpx.ConnectError):
        return SendResult(False, error=f"could not connect: {exc}", retryable=True)
    return SendResult(False, error=f"network error, outcome unknown: {exc}", outcome_unknown=True)
