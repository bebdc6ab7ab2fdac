"""Slack through slack-bolt (async), in Socket Mode, embedded by its lifecycle calls.

`to_event` is pure over an Events API body. The adapter connects with
`AsyncSocketModeHandler.connect_async` (the SDK acks each envelope and reconnects by
itself), replies in the thread of the message in channels, converts Markdown to mrkdwn,
and turns off slack_sdk's connection-error retry, which can post a message twice.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.render import to_slack_mrkdwn
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
from gateway.edge.ports import Capabilities, DownloadError, EventSink, bounded

logger = logging.getLogger(__name__)
_SLACK_TIMESTAMP = re.compile(r"[0-9]{1,12}")
# slack-bolt reads SLACK_BOT_TOKEN from the environment by itself and then warns that the
# client we pass (which holds that same token) wins: true, and nothing to act on
logging.getLogger("slack_bolt.AsyncApp").addFilter(
    lambda record: "`token` will be unused" not in record.getMessage()
)

_CHANNEL_TYPES = {
    "im": ChatType.DM,
    "mpim": ChatType.GROUP,
    "group": ChatType.GROUP,
    "channel": ChatType.CHANNEL,
}
_IGNORED_SUBTYPES = {
    "message_changed",
    "message_deleted",
    "bot_message",
    "channel_join",
    "channel_leave",
    "thread_broadcast",
}
SLASH_COMMAND = "/hermes"
PERMANENT = {
    "channel_not_found",
    "not_in_channel",
    "is_archived",
    "account_inactive",
    "invalid_auth",
    "msg_too_long",
    "no_text",
    "message_not_found",
    "cant_update_message",
    "edit_window_closed",
}


def to_event(body: dict[str, Any], bot_user_id: str) -> MessageEvent | None:
    event = body.get("event") or {}
    if event.get("type") not in ("message", "app_mention"):
        return None
    if event.get("subtype") in _IGNORED_SUBTYPES or event.get("bot_id"):
        return None
    user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
    if not user or not channel or not ts:
        return None
    text = event.get("text") or ""
    tag = f"<@{bot_user_id}>"
    mentioned = event.get("type") == "app_mention" or tag in text
    chat_type = _CHANNEL_TYPES.get(event.get("channel_type", ""))
    if chat_type is None:
        chat_type = ChatType.DM if str(channel).startswith("D") else ChatType.CHANNEL
    files = event.get("files") or []
    return MessageEvent(
        platform="slack",
        event_id=str(body.get("event_id") or f"{channel}:{ts}"),
        message_id=f"{channel}:{ts}",  # message and app_mention of one post share it
        chat=ChatRef(str(channel), chat_type, event.get("thread_ts")),
        user=UserRef(str(user), str(user), bool(event.get("bot_id"))),
        text=" ".join(text.replace(tag, " ").split()),
        mentioned=mentioned,
        attachments=tuple(_attachment(f) for f in files),
        sent_at=_float(ts),
        raw=body,
    )


def _attachment(item: dict[str, Any]) -> Attachment:
    mime = str(item.get("mimetype") or "")
    kind = Attachment.kind_for(mime, voice=item.get("subtype") == "slack_audio")
    duration = item.get("duration_ms")
    return Attachment(
        kind,
        name=str(item.get("name") or ""),
        mime=mime,
        size=item.get("size") if isinstance(item.get("size"), int) else None,
        ref=str(item.get("url_private_download") or item.get("url_private") or ""),
        duration=float(duration) / 1000 if isinstance(duration, int | float) else None,
    )


def command_to_event(command: dict[str, Any]) -> MessageEvent | None:
    """A `/hermes <subcommand>` slash command as a text command event."""
    user, channel = command.get("user_id"), command.get("channel_id")
    if not user or not channel:
        return None
    words = str(command.get("text") or "help").split()
    trigger = str(command.get("trigger_id") or f"{channel}:{user}:{time.time_ns()}")
    chat_type = ChatType.DM if str(channel).startswith("D") else ChatType.CHANNEL
    return MessageEvent(
        platform="slack",
        event_id=f"cmd:{trigger}",
        message_id=f"cmd:{trigger}",
        chat=ChatRef(str(channel), chat_type),
        user=UserRef(str(user), str(command.get("user_name") or user)),
        text="/" + " ".join(words),
        mentioned=True,  # addressed to the bot by construction
        raw=command,
    )


ACTION_PREFIX = "hermes_"
SECTION_LIMIT = 3000  # a section block's text


def press_event(body: dict[str, Any]) -> MessageEvent | None:
    """A block_actions payload (a press of one of our buttons) as a pressed event."""
    actions = body.get("actions") or []
    user = (body.get("user") or {}).get("id")
    container = body.get("container") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id")
    ts = (body.get("message") or {}).get("ts") or container.get("message_ts")
    if not actions or not user or not channel or not ts:
        return None
    action = actions[0]
    press = f"{action.get('action_ts') or time.time_ns()}:{user}"
    chat_type = ChatType.DM if str(channel).startswith("D") else ChatType.CHANNEL
    return MessageEvent(
        platform="slack",
        event_id=f"press:{press}",
        message_id=f"press:{press}",
        chat=ChatRef(str(channel), chat_type),
        user=UserRef(str(user), str((body.get("user") or {}).get("name") or user)),
        text=str(action.get("value") or ""),
        reply_to_id=f"{channel}:{ts}",
        mentioned=True,
        pressed=True,
        raw=body,
    )


def _blocks(text: str, buttons: tuple[Button, ...] | None) -> list[dict[str, Any]] | None:
    """The message as blocks when it has (or loses) buttons: its text, then the buttons."""
    if buttons is None or len(text) > SECTION_LIMIT:
        return None
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
    if buttons:
        elements = []
        for index, button in enumerate(buttons):
            element: dict[str, Any] = {
                "type": "button",
                "text": {"type": "plain_text", "text": button.label[:75]},
                "action_id": f"{ACTION_PREFIX}{index}",
                "value": button.command,
            }
            if button.style != "default":
                element["style"] = button.style
            elements.append(element)
        blocks.append({"type": "actions", "elements": elements})
    return blocks


class SlackAdapter:
    name = "slack"
    capabilities = Capabilities(
        max_length=40_000,  # chat.postMessage truncates text past 40,000 characters
        render=to_slack_mrkdwn,
        reorder_window_s=0.15,
        edit_interval_s=1.0,  # chat.update is Tier 3 (about 50 a minute)
        group_edit_interval_s=1.5,
        max_file_bytes=1024 * 1024 * 1024,  # files_upload_v2 takes up to 1 GB
    )

    def __init__(
        self,
        bot_token: str,
        app_token: str | None = None,
        api_base: str | None = None,
        signing_secret: str | None = None,
        path: str = "/slack/events",
    ) -> None:
        """Socket Mode with an app token; the HTTP Events API with a signing secret."""
        if not app_token and not signing_secret:
            raise ValueError("Slack needs an app token (Socket Mode) or a signing secret (HTTP)")
        base = api_base or "https://slack.com/api/"
        self.client = AsyncWebClient(token=bot_token, base_url=base, retry_handlers=[])
        # who the bot is, asked of Slack once (`_identify`)
        self._identity: AuthorizeResult | None = None
        self._identifying = asyncio.Lock()

        async def authorize() -> AuthorizeResult:  # bolt passes what the names ask for
            return await self._identify()

        self.app = AsyncApp(
            # bolt's own client holds no token: each event's comes from `_identify`
            client=AsyncWebClient(base_url=base, retry_handlers=[]),
            authorize=authorize,
            signing_secret=signing_secret,
            request_verification_enabled=signing_secret is not None,
            ignoring_self_events_enabled=True,
            # HTTP mode: an event is taken (recorded, queued) before Slack hears 200, so
            # one accepted by a process that dies at once is redelivered, not lost
            process_before_response=not app_token,
        )
        self.handler = None
        self._app_token = app_token
        if app_token:
            self.handler = AsyncSocketModeHandler(
                self.app, app_token, web_client=AsyncWebClient(base_url=base, retry_handlers=[])
            )
        self.path = path
        self.bot_user_id = ""
        self._sink: EventSink | None = None  # set once started: until then, Slack retries
        self._closed = False
        # listeners from the start: the gateway's server may receive an event before
        # `start` is done (auth.test); bolt must never answer "no listener" (404) to it
        self.app.event("message")(self._on_event)
        self.app.event("app_mention")(self._on_event)
        self.app.command(SLASH_COMMAND)(self._on_command)
        self.app.action(re.compile(f"^{ACTION_PREFIX}"))(self._on_action)

    async def start(self, sink: EventSink) -> None:
        identity = await self._identify()
        self.bot_user_id = str(identity.bot_user_id or identity.user_id)
        self._sink = sink
        if self.handler is not None:
            await self.handler.connect_async()  # type: ignore[no-untyped-call]

    async def _identify(self) -> AuthorizeResult:
        """Bolt authorizes every event before its listener runs. Its default asks Slack
        (auth.test) for each event that arrives before the first answer, and those
        answers come back in any order, the events with them: a burst at connection (a
        restart, with Slack redelivering what waited) reached the gateway shuffled. Here
        it is asked once (at start), and the events wait their turn for it in the order
        they came (the lock hands over first come, first served, also once known)."""
        async with self._identifying:
            if self._identity is None:
                self._identity = AuthorizeResult.from_auth_test_response(
                    auth_test_response=await self.client.auth_test(), bot_token=self.client.token
                )
            return self._identity

    async def stop_intake(self) -> None:
        """Socket Mode: disconnect; Slack redelivers what we have not acknowledged. (HTTP
        mode: the gateway's server answers 503 and Slack retries.) Sending goes on
        through the Web API client."""
        if self.handler is not None and not self._closed:
            self._closed = True
            await self.handler.close_async()  # type: ignore[no-untyped-call]

    async def stop(self) -> None:
        await self.stop_intake()

    async def whoami(self) -> str:
        try:
            auth = await self.client.auth_test()
            who = f"{auth.get('user')} in {auth.get('team')} ({auth.get('user_id')})"
            if self.handler is not None:  # the app-level token opens Socket Mode connections
                await self.client.apps_connections_open(app_token=self._app_token or "")
                who += ", Socket Mode allowed"
            return who
        finally:
            await self.stop()  # the Socket Mode client holds an HTTP session from the start

    async def connection(self) -> str:
        """HTTP mode has no connection to lose; Socket Mode reconnects by itself."""
        if self.handler is None or await self.handler.client.is_connected():
            return "connected"
        return "reconnecting: the Socket Mode connection is down"

    def routes(self) -> list[Route]:
        """HTTP mode: Slack POSTs events here; bolt verifies the signature and acks."""
        return [] if self.handler is not None else [Route("POST", self.path, self._on_http)]

    async def _on_http(self, request: web.Request) -> web.Response:
        if self._sink is None:  # not started yet (or the start failed): Slack retries
            return web.Response(status=503, text="starting", headers={"Retry-After": "1"})
        # Slack sends seconds since 1970: anything else is not Slack (bolt would fail
        # converting it, a 500 with a traceback for anyone who sends one)
        if not _SLACK_TIMESTAMP.fullmatch(request.headers.get("X-Slack-Request-Timestamp", "")):
            return web.Response(status=401, text="invalid request")
        body = await request.text()
        try:
            bolt = AsyncBoltRequest(
                body=body,
                query=request.query_string,
                headers={k.lower(): v for k, v in request.headers.items()},
            )
            response = await self.app.async_dispatch(bolt)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            # a body bolt cannot read (not a JSON object): refused, said once
            logger.warning("slack: a request bolt could not read (%s): 400", exc)
            return web.Response(status=400, text="bad request")
        headers = {
            k: v[0] for k, v in response.headers.items() if v and k.lower() != "content-length"
        }
        return web.Response(status=response.status, text=response.body, headers=headers)

    async def _on_command(self, ack: Any, command: dict[str, Any]) -> None:
        """`/hermes new` becomes the text command `/new` from that user, in that channel."""
        await ack()  # within Slack's 3 s; the answer follows as a normal message
        event = command_to_event(command)
        if event is not None and self._sink is not None:
            await self._sink(event)

    async def _on_action(self, ack: Any, body: dict[str, Any]) -> None:
        await ack()  # within Slack's 3 s; the message is updated when decided
        event = press_event(body)
        if event is not None and self._sink is not None:
            await self._sink(event)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """`url_private`, with the bot token (files are not public)."""
        if attachment.size is not None and attachment.size > max_bytes:
            raise DownloadError.too_big(attachment.size, max_bytes)
        if not attachment.ref:
            raise DownloadError("Slack did not say where the file is.")
        headers = {"Authorization": f"Bearer {self.client.token}"}
        timeout = aiohttp.ClientTimeout(total=120)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(attachment.ref, headers=headers) as response,
            ):
                if response.status != 200:
                    raise DownloadError(f"Slack answered HTTP {response.status} for the file.")
                data = await bounded(response.content.iter_chunked(64 * 1024), max_bytes)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DownloadError(f"The download failed ({type(exc).__name__}).") from None
        if (
            "text/html" in response.headers.get("Content-Type", "")
            and attachment.mime != "text/html"
        ):
            raise DownloadError("Slack sent a login page instead of the file (files:read scope?).")
        return data

    async def direct_chat(self, platform_user_id: str) -> ChatRef | None:
        """conversations.open: the DM channel with that user (D...)."""
        try:
            response = await self.client.conversations_open(users=platform_user_id)
        except Exception as exc:
            logger.warning("slack: cannot open a DM with %s: %s", platform_user_id, exc)
            return None
        channel = (response.get("channel") or {}).get("id")
        return ChatRef(str(channel), ChatType.DM) if channel else None

    async def _on_event(self, body: dict[str, Any]) -> None:
        event = to_event(body, self.bot_user_id)
        if event is not None and self._sink is not None:
            await self._sink(event)

    async def typing(self, chat: ChatRef) -> None:
        """Slack has no typing indicator for bots in the Events API: nothing to do."""

    async def send(self, message: OutboundMessage) -> SendResult:
        chat = message.chat
        thread = _thread(chat, message.reply_to_id)
        try:
            text = message.as_sent(to_slack_mrkdwn)
            response = await self.client.chat_postMessage(
                channel=chat.id,
                text=text,
                blocks=_blocks(text, message.buttons or None),
                thread_ts=thread,
                mrkdwn=True,
            )
        except SlackApiError as exc:
            return _refused(exc)
        except Exception as exc:  # a dropped connection: it may have been posted
            return SendResult(
                False, error=f"outcome unknown: {type(exc).__name__}: {exc}", outcome_unknown=True
            )
        return SendResult(True, (f"{chat.id}:{response['ts']}",))

    async def send_file(self, file: OutboundFile) -> SendResult:
        """files_upload_v2 (an external upload: a URL asked for, the bytes POSTed there,
        the upload completed into the chat with the caption as its comment)."""
        chat = file.chat
        try:
            response = await self.client.files_upload_v2(
                channel=chat.id,
                file=file.data,
                filename=file.name,
                title=file.name,
                initial_comment=file.caption or None,
                thread_ts=_thread(chat, file.reply_to_id),
            )
        except SlackApiError as exc:
            return _refused(exc)
        except SlackRequestError as exc:  # the bytes were refused: nothing was shared
            return SendResult(False, error=f"upload refused: {exc}", retryable=True)
        except Exception as exc:  # a dropped connection: it may have been shared
            return SendResult(
                False, error=f"outcome unknown: {type(exc).__name__}: {exc}", outcome_unknown=True
            )
        shared = response.get("files") or [{}]
        return SendResult(True, (f"{chat.id}:{shared[0].get('id', '')}",))

    async def edit(self, chat: ChatRef, message_id: str, message: OutboundMessage) -> SendResult:
        """chat.update (safe to repeat: an unknown outcome is retryable here)."""
        ts = message_id.rsplit(":", 1)[-1]
        try:
            text = message.as_sent(to_slack_mrkdwn)
            await self.client.chat_update(
                channel=chat.id, ts=ts, text=text, blocks=_blocks(text, message.buttons)
            )
        except SlackApiError as exc:
            return _refused(exc)
        except Exception as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}", retryable=True)
        return SendResult(True, (message_id,))

    async def delete(self, chat: ChatRef, message_id: str) -> SendResult:
        try:
            await self.client.chat_delete(channel=chat.id, ts=message_id.rsplit(":", 1)[-1])
        except SlackApiError as exc:
            return _refused(exc)
        except Exception as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}", retryable=True)
        return SendResult(True, (message_id,))


def _thread(chat: ChatRef, reply_to_id: str | None) -> str | None:
    """Where a message goes: the chat's thread, or the thread of the message it answers
    in a channel."""
    if chat.thread_id is None and chat.type is not ChatType.DM and reply_to_id:
        return reply_to_id.rsplit(":", 1)[-1]
    return chat.thread_id


def _refused(exc: SlackApiError) -> SendResult:
    """What an error answer of the Web API means for sending again."""
    status = exc.response.status_code
    error = str(exc.response.get("error", "")) if exc.response.data else ""
    if status == 429:
        retry_after = float(exc.response.headers.get("Retry-After", "1"))
        return SendResult(False, error="ratelimited", retryable=True, retry_after=retry_after)
    return SendResult(
        False,
        error=error or f"HTTP {status}",
        retryable=status >= 500 and error not in PERMANENT,
    )


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
