"""The terminal as a platform: `hermes chat` talks to the router like any other adapter.

The chat loop (gateway/cli/chat_cmd.py) reads a line and awaits `ask(text)`, which
pushes it into the router's sink as a message from the local owner and resolves with
the reply the router sends back for it. Cancelling `ask` (Ctrl-C) sends `/stop`, which
cancels the running turn in the router; the message itself is already saved. A file
the assistant sends is saved in the directory the chat was started in (never over an
existing file: "notes (1).md"), and where it went is shown as a notice.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

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
from gateway.edge.ports import Answer, Capabilities, DownloadError, EventSink

CLI_CHAT = ChatRef("local", ChatType.DM)
CLI_USER = UserRef("local", "owner")


class CliAdapter:
    name = "cli"
    # the terminal renders the Markdown itself and has no length limit worth chunking at
    # a terminal shows it all, unsplit, and redraws a streamed reply as fast as it comes
    capabilities = Capabilities(
        max_length=sys.maxsize,
        edit_interval_s=0.1,
        buttons=False,
        max_file_bytes=sys.maxsize,  # a file on the disk: the tool's own limit applies
    )

    def __init__(self, files_dir: Path | None = None) -> None:
        self.files_dir = files_dir or Path.cwd()  # where files the assistant sends go
        self._sink: EventSink | None = None
        self._waiting: dict[str, asyncio.Future[Answer]] = {}
        self._partial: dict[str, Callable[[str], None]] = {}
        self.notices: list[str] = []  # messages nobody asked for (reminders), to show next
        self.on_notice: Callable[[str], bool] | None = None  # shows one now, if it can
        self._ids = itertools.count()
        self._run = time.time_ns()  # message ids stay unique across runs (state.db dedupes)

    def event(self, text: str) -> MessageEvent:
        message_id = f"{self._run}-{next(self._ids)}"
        return MessageEvent(
            platform=self.name,
            event_id=message_id,
            message_id=message_id,
            chat=CLI_CHAT,
            user=CLI_USER,
            text=text,
            sent_at=time.time(),
        )

    async def start(self, sink: EventSink) -> None:
        self._sink = sink

    async def stop_intake(self) -> None:
        self._sink = None

    async def connection(self) -> str:
        return "connected"  # in-process

    async def whoami(self) -> str:
        return "the terminal"

    async def stop(self) -> None:
        self._sink = None
        for future in self._waiting.values():
            future.cancel()

    async def ask(self, text: str, on_partial: Callable[[str], None] | None = None) -> Answer:
        """Send one line; the router's reply to it (streamed through `on_partial`)."""
        if self._sink is None:
            raise RuntimeError("the CLI adapter is not started")
        event = self.event(text)
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._waiting[event.message_id] = future
        if on_partial is not None:
            self._partial[event.message_id] = on_partial
        try:
            await self._sink(event)
            return await future
        except asyncio.CancelledError:
            if self._sink is not None:
                await self._sink(self.event("/stop"))
            raise
        finally:
            self._waiting.pop(event.message_id, None)
            self._partial.pop(event.message_id, None)

    async def send(self, message: OutboundMessage) -> SendResult:
        """The reply to a line (its id: the line's, so that edits find its asker)."""
        return self._show(message.reply_to_id or "", message)

    async def edit(self, chat: ChatRef, message_id: str, message: OutboundMessage) -> SendResult:
        return self._show(message_id, message)

    async def delete(self, chat: ChatRef, message_id: str) -> SendResult:
        return SendResult(True, (message_id,))  # one message per reply: nothing extra

    def _show(self, asked: str, message: OutboundMessage) -> SendResult:
        if message.partial:
            show = self._partial.get(asked)
            if show is not None:
                show(message.text)
        else:
            future = self._waiting.get(asked)
            if future is not None and not future.done():
                future.set_result(Answer(message.text, message.failed))
            elif future is None:  # nobody waits for it (a reminder; the turn a typed yes
                self._notice(message.text)  # goes on with)
        return SendResult(True, (asked or f"notice-{len(self.notices)}",))

    async def send_file(self, file: OutboundFile) -> SendResult:
        """The file saved in `files_dir` under its name (a free one: never over a file
        that is there), and a notice saying where."""
        try:
            path = await asyncio.to_thread(_save, self.files_dir, file.name, file.data)
        except OSError as exc:
            return SendResult(False, error=f"could not save {file.name}: {exc.strerror or exc}")
        lines = [file.caption] if file.caption else []
        self._notice("\n".join([*lines, f"📎 Saved {file.name} to {path}"]))
        return SendResult(True, (str(path),))

    def _notice(self, text: str) -> None:
        """Shown now if the chat loop can, else with the next answer."""
        if self.on_notice is None or not self.on_notice(text):
            self.notices.append(text)

    def take_notices(self) -> list[str]:
        taken, self.notices = self.notices, []
        return taken

    async def direct_chat(self, platform_user_id: str) -> ChatRef | None:
        return None  # the terminal is only ever the chat in front of it

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        raise DownloadError("the terminal chat does not take files")

    async def typing(self, chat: ChatRef) -> None:
        """The chat loop shows its own spinner."""


def _save(folder: Path, name: str, data: bytes) -> Path:
    """`data` written to a new file `name` in `folder` ("name (1).ext" and so on when it
    is taken): created exclusively, so nothing there is ever overwritten."""
    stem, dot, extension = name.rpartition(".")
    if not stem:
        stem, dot, extension = name, "", ""
    for number in range(1000):
        candidate = folder / (name if number == 0 else f"{stem} ({number}){dot}{extension}")
        try:
            out = candidate.open("xb")
        except FileExistsError:
            continue
        try:
            with out:
                out.write(data)
        except OSError:  # a full disk: no half a file left behind
            candidate.unlink(missing_ok=True)
            raise
        return candidate
    raise FileExistsError(f"{name} and 999 numbered copies are there already")
