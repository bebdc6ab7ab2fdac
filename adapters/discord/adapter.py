"""Discord through discord.py 2, embedded with `Client.start` in a task.

Messages are read from the raw gateway stream (`on_socket_raw_receive`), so `to_event`
is pure over the MESSAGE_CREATE payload and needs no cache. The `message_content`
intent is enabled (guild messages arrive empty without it; turn it on in the developer
portal too). discord.py waits out 429s (with the normal Via header) and resumes the
gateway session after a drop by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import discord
import yarl

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
from gateway.edge.ports import Capabilities, ChatMark, DownloadError, EventSink, MenuEntry

logger = logging.getLogger(__name__)
# Hermes never joins voice channels: discord.py's warnings that voice support is missing
# (PyNaCl, davey) at every start would only send operators installing what is not needed
logging.getLogger("discord.client").addFilter(
    lambda record: "voice will NOT be supported" not in record.getMessage()
)
READY_TIMEOUT_S = 30.0
HISTORY_PAGE = 100  # the most messages one history request returns


def to_event(
    data: dict[str, Any], bot_id: str, chat_type: ChatType | None = None
) -> MessageEvent | None:
    """A MessageEvent from a MESSAGE_CREATE payload (or a message of the REST API's
    history, which does not say its guild: `chat_type` then), or None when it is not
    for us."""
    author = data.get("author") or {}
    if not data.get("id") or not data.get("channel_id") or not author.get("id"):
        return None
    content = str(data.get("content") or "")
    tags = (f"<@{bot_id}>", f"<@!{bot_id}>")
    mentioned = any(str(m.get("id")) == bot_id for m in data.get("mentions") or [])
    mentioned = mentioned or any(tag in content for tag in tags)
    for tag in tags:
        content = content.replace(tag, " ")
    referenced = data.get("referenced_message") or {}
    if chat_type is None:
        chat_type = ChatType.GROUP if data.get("guild_id") else ChatType.DM
    channel = str(data["channel_id"])
    return MessageEvent(
        platform="discord",
        event_id=f"{channel}:{data['id']}",  # the gateway has no delivery id: the message's
        message_id=f"{channel}:{data['id']}",
        chat=ChatRef(channel, chat_type),
        user=UserRef(
            str(author["id"]),
            author.get("global_name") or author.get("username", ""),
            bool(author.get("bot")),
        ),
        text=" ".join(content.split()),
        reply_to_id=f"{channel}:{referenced['id']}" if referenced.get("id") else None,
        mentioned=mentioned,
        replied_to_bot=str((referenced.get("author") or {}).get("id")) == bot_id,
        attachments=tuple(_attachment(a) for a in data.get("attachments") or []),
        sent_at=_snowflake_time(str(data["id"])),
        order=int(data["id"]),  # snowflakes grow: ties in the millisecond keep their order
        raw=data,
    )


def _attachment(item: dict[str, Any]) -> Attachment:
    mime = str(item.get("content_type") or "")
    voice = bool(int(item.get("flags") or 0) & 1 << 13) or "duration_secs" in item  # IS_VOICE
    kind = Attachment.kind_for(mime, voice=voice)
    duration = item.get("duration_secs")
    return Attachment(
        kind,
        name=str(item.get("filename") or ""),
        mime=mime,
        size=item.get("size") if isinstance(item.get("size"), int) else None,
        ref=str(item.get("url") or ""),
        duration=float(duration) if isinstance(duration, int | float) else None,
    )


def interaction_to_event(
    name: str, interaction: discord.Interaction, text: str = ""
) -> MessageEvent | None:
    """A slash command as the text command `/name text`; the answer goes to the channel."""
    if interaction.channel_id is None:
        return None
    user = interaction.user
    chat_type = ChatType.GROUP if interaction.guild_id else ChatType.DM
    return MessageEvent(
        platform="discord",
        event_id=f"interaction:{interaction.id}",
        message_id=f"interaction:{interaction.id}",
        chat=ChatRef(str(interaction.channel_id), chat_type),
        user=UserRef(str(user.id), user.display_name, user.bot),
        text=f"/{name} {' '.join(text.split())}".strip(),
        mentioned=True,
    )


def press_event(interaction: discord.Interaction) -> MessageEvent | None:
    """A press of one of our buttons (a message component interaction) as an event."""
    data: Any = interaction.data or {}
    if interaction.channel_id is None or interaction.message is None or not data.get("custom_id"):
        return None
    user = interaction.user
    channel = str(interaction.channel_id)
    return MessageEvent(
        platform="discord",
        event_id=f"interaction:{interaction.id}",
        message_id=f"interaction:{interaction.id}",
        chat=ChatRef(channel, ChatType.GROUP if interaction.guild_id else ChatType.DM),
        user=UserRef(str(user.id), user.display_name, user.bot),
        text=str(data["custom_id"]),
        reply_to_id=f"{channel}:{interaction.message.id}",
        mentioned=True,
        pressed=True,
    )


_STYLES = {
    "primary": discord.ButtonStyle.success,
    "danger": discord.ButtonStyle.danger,
    "default": discord.ButtonStyle.secondary,
}


def _view(buttons: tuple[Button, ...] | None) -> discord.ui.View | None:
    """Buttons as a component row; a press is answered by `on_interaction`."""
    if not buttons:
        return None
    view = discord.ui.View(timeout=None)
    for button in buttons:
        view.add_item(
            discord.ui.Button(
                label=button.label[:80], custom_id=button.command[:100], style=_STYLES[button.style]
            )
        )
    return view


class DiscordAdapter:
    name = "discord"
    # message edits: 5 per 5 s in a channel (discord.py waits out a 429 by itself)
    capabilities = Capabilities(
        max_length=2000,
        edit_interval_s=1.0,
        group_edit_interval_s=1.5,
        max_file_bytes=10 * 1024 * 1024,  # an upload without a server's boost
    )

    def __init__(
        self,
        token: str,
        api_base: str | None = None,
        gateway_url: str | None = None,
        menu: Sequence[MenuEntry] = (),
    ) -> None:
        if api_base:  # a REST proxy, or a test fake (process-wide in discord.py)
            discord.http.Route.BASE = api_base.rstrip("/")
        if gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)
        intents = discord.Intents.default()
        intents.message_content = True
        self.client = discord.Client(
            intents=intents, enable_debug_events=True, guild_ready_timeout=1.0
        )
        self.client.event(self.on_socket_raw_receive)
        for listener in (self.on_disconnect, self.on_resumed, self.on_ready, self.on_interaction):
            self.client.event(listener)
        self.tree = discord.app_commands.CommandTree(self.client)
        for entry in menu:  # application commands, answered as the text commands
            name = entry.name
            handler = self._slash_with_text(name) if entry.takes_text else self._slash_handler(name)
            self.tree.command(name=name, description=entry.summary[:100])(handler)  # type: ignore[arg-type]
        self.token = token
        self._task: asyncio.Task[None] | None = None
        self._sink: EventSink | None = None
        self._down = ""  # why the gateway connection is down while discord.py reconnects

    async def start(self, sink: EventSink) -> None:
        self._sink = sink
        self._task = asyncio.create_task(self.client.start(self.token))
        ready = asyncio.create_task(self.client.wait_until_ready())
        done, _ = await asyncio.wait(
            {self._task, ready}, timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if ready not in done:
            ready.cancel()
            if self._task in done:
                self._task.result()  # raises the login/connect error
            raise TimeoutError(f"discord did not become ready within {READY_TIMEOUT_S:g} s")
        await self.tree.sync()  # once per start: it replaces the app's commands with a PUT

    async def stop_intake(self) -> None:
        """Discord does not replay messages sent while a bot was offline, so the gateway
        connection stays open until `stop`: what arrives meanwhile is answered."""

    async def whoami(self) -> str:
        try:
            await self.client.login(self.token)  # GET /users/@me, no gateway connection
            user = self.client.user
            return f"{user} ({user.id})" if user is not None else "unknown"
        finally:
            await self.client.close()

    async def connection(self) -> str:
        """discord.py reconnects (and resumes) by itself; its task ends only when it
        gives up (a refused token, a privileged intent not enabled for the app)."""
        if self._task is not None and self._task.done():
            failure = None if self._task.cancelled() else self._task.exception()
            return f"lost: {type(failure).__name__}: {failure}" if failure else "lost: closed"
        return f"reconnecting: {self._down}" if self._down else "connected"

    async def on_disconnect(self) -> None:
        self._down = "the gateway connection dropped"

    async def on_resumed(self) -> None:
        self._down = ""

    async def on_ready(self) -> None:
        self._down = ""

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A button press: acknowledged at once (within Discord's 3 s), then handled."""
        if interaction.type is not discord.InteractionType.component:
            return  # slash commands are the command tree's
        with contextlib.suppress(discord.HTTPException):
            await interaction.response.defer()
        event = press_event(interaction)
        if event is not None and self._sink is not None:
            await self._sink(event)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The attachment from Discord's CDN (its size is in the message)."""
        if attachment.size is not None and attachment.size > max_bytes:
            raise DownloadError.too_big(attachment.size, max_bytes)
        if not attachment.ref:
            raise DownloadError("Discord did not say where the file is.")
        try:
            data = await self.client.http.get_from_cdn(attachment.ref)
        except (discord.HTTPException, aiohttp.ClientError, TimeoutError) as exc:
            raise DownloadError(f"The download failed ({type(exc).__name__}).") from None
        if len(data) > max_bytes:
            raise DownloadError.too_big(len(data), max_bytes)
        return data

    async def missed(self, marks: list[ChatMark], most: int) -> list[MessageEvent]:
        """Each chat's messages after its mark, oldest first: GET /channels/{id}/messages
        with `after` (Discord answers the up to 100 messages right after it, newest
        first), page after page up to `most`. A chat that cannot be read any more (the
        channel gone, the bot removed) is skipped."""
        user = self.client.user
        if user is None:
            return []
        found: list[MessageEvent] = []
        for mark in marks:
            after = mark.order
            got: list[dict[str, Any]] = []
            while len(got) < most:
                want = min(HISTORY_PAGE, most - len(got))
                try:
                    page = await self.client.http.logs_from(mark.chat.id, want, after=after)
                except (discord.NotFound, discord.Forbidden) as exc:
                    logger.info("discord: cannot read channel %s any more: %s", mark.chat.id, exc)
                    break
                ordered: list[dict[str, Any]] = sorted(
                    (dict(m) for m in page), key=lambda data: int(data["id"])
                )
                got.extend(ordered)
                if len(ordered) < want:
                    break
                after = int(ordered[-1]["id"])
            for data in got:
                event = to_event(data, str(user.id), mark.chat.type)
                if event is not None:
                    found.append(event)
        return found

    async def direct_chat(self, platform_user_id: str) -> ChatRef | None:
        """The DM channel with that user (POST /users/@me/channels)."""
        if not platform_user_id.isdigit():
            return None
        try:
            user = await self.client.fetch_user(int(platform_user_id))
            channel = await user.create_dm()
        except (discord.HTTPException, aiohttp.ClientError) as exc:
            logger.warning("discord: cannot open a DM with %s: %s", platform_user_id, exc)
            return None
        return ChatRef(str(channel.id), ChatType.DM)

    async def stop(self) -> None:
        await self.client.close()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._task, 10)

    async def on_socket_raw_receive(self, raw: str) -> None:
        with contextlib.suppress(ValueError):
            frame = json.loads(raw)
            if frame.get("t") != "MESSAGE_CREATE" or self.client.user is None:
                return
            event = to_event(frame.get("d") or {}, str(self.client.user.id))
            if event is not None and self._sink is not None:
                await self._sink(event)

    def _slash_handler(self, name: str) -> Callable[[discord.Interaction], Awaitable[None]]:
        async def handler(interaction: discord.Interaction) -> None:
            await self._answer_slash(name, interaction, "")

        return handler

    def _slash_with_text(self, name: str) -> Callable[[discord.Interaction, str], Awaitable[None]]:
        async def handler(interaction: discord.Interaction, text: str = "") -> None:
            await self._answer_slash(name, interaction, text)

        return handler

    async def _answer_slash(self, name: str, interaction: discord.Interaction, text: str) -> None:
        await interaction.response.send_message("On it.", ephemeral=True)  # within 3 s
        event = interaction_to_event(name, interaction, text)
        if event is not None and self._sink is not None:
            await self._sink(event)

    async def typing(self, chat: ChatRef) -> None:
        await self.client.http.send_typing(int(chat.id))

    async def send(self, message: OutboundMessage) -> SendResult:
        extra: dict[str, Any] = {}
        if (view := _view(message.buttons)) is not None:
            extra["view"] = view
        return await self._post(message.chat, message.reply_to_id, content=message.text, **extra)

    async def send_file(self, file: OutboundFile) -> SendResult:
        """The file as the message's attachment (multipart), the caption its content."""
        upload = discord.File(io.BytesIO(file.data), filename=file.name)
        return await self._post(
            file.chat, file.reply_to_id, content=file.caption or None, file=upload
        )

    async def _post(self, chat: ChatRef, reply_to_id: str | None, **fields: Any) -> SendResult:
        channel = self.client.get_partial_messageable(int(chat.id))
        if reply_to_id:
            fields["reference"] = discord.MessageReference(
                message_id=int(reply_to_id.rsplit(":", 1)[-1]),
                channel_id=int(chat.id),
                fail_if_not_exists=False,
            )
        try:
            sent = await channel.send(allowed_mentions=discord.AllowedMentions.none(), **fields)
        except discord.HTTPException as exc:
            return _refused(exc)
        except (aiohttp.ClientError, TimeoutError) as exc:  # it may have been posted
            return SendResult(
                False, error=f"outcome unknown: {type(exc).__name__}: {exc}", outcome_unknown=True
            )
        return SendResult(True, (f"{chat.id}:{sent.id}",))

    async def edit(self, chat: ChatRef, message_id: str, message: OutboundMessage) -> SendResult:
        """PATCH the message (safe to repeat: an unknown outcome is retryable here)."""
        partial = self._message(chat, message_id)
        try:
            extra: dict[str, Any] = {}
            if message.buttons is not None:  # () takes the buttons away
                extra["view"] = _view(message.buttons)
            await partial.edit(
                content=message.text, allowed_mentions=discord.AllowedMentions.none(), **extra
            )
        except discord.HTTPException as exc:
            return _refused(exc)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}", retryable=True)
        return SendResult(True, (message_id,))

    async def delete(self, chat: ChatRef, message_id: str) -> SendResult:
        try:
            await self._message(chat, message_id).delete()
        except discord.HTTPException as exc:
            return _refused(exc)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return SendResult(False, error=f"{type(exc).__name__}: {exc}", retryable=True)
        return SendResult(True, (message_id,))

    def _message(self, chat: ChatRef, message_id: str) -> discord.PartialMessage:
        channel = self.client.get_partial_messageable(int(chat.id))
        return channel.get_partial_message(int(message_id.rsplit(":", 1)[-1]))


def _refused(exc: discord.HTTPException) -> SendResult:
    if exc.status == 429:
        wait = float(exc.response.headers.get("Retry-After", "1"))
        return SendResult(False, error="rate limited", retryable=True, retry_after=wait)
    return SendResult(False, error=f"HTTP {exc.status}: {exc.text}", retryable=exc.status >= 500)


DISCORD_EPOCH_MS = 1_420_070_400_000


def _snowflake_time(snowflake: str) -> float | None:
    """The creation time a Discord id carries (ms since 2015 in its top 42 bits)."""
    if not snowflake.isdigit():
        return None
    return ((int(snowflake) >> 22) + DISCORD_EPOCH_MS) / 1000
