"""One driver per platform, for every suite that runs the same scenario on each of them
(the adapter contract, streaming, media, approval buttons).

A driver says how a person does things on its platform (write, send a photo or a voice
note, press a button), how the platform misbehaves (a 429, a 5xx, a dropped
connection) and what the bot did there (posts, edits, what its messages show now). All
calls block (a suite runs them with `asyncio.to_thread`). A platform lacks an ability
when its driver does not override the method; a suite asks `platforms_with(...)` for the
platforms that have what its scenarios use, so a scenario never runs where it cannot.

The platforms' fakes are the `telegram`, `slack` and `discord_fake` fixtures
(tests/adapters/conftest.py), started only for the drivers a test uses; the terminal
(`cli`) has no server: its driver talks to the adapter in the gateway's own loop.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gateway.edge.ports import MenuEntry, PlatformAdapter
from tests.adapters.harness import SERVED_AT
from tests.fakes.discord_server import DiscordFault, FakeDiscord
from tests.fakes.matrix_server import BOT as MATRIX_BOT
from tests.fakes.matrix_server import BUTTONS as MATRIX_BUTTONS
from tests.fakes.matrix_server import TOKEN as MATRIX_TOKEN
from tests.fakes.matrix_server import FakeMatrix
from tests.fakes.matrix_server import Fault as MatrixFault
from tests.fakes.matrix_server import user as matrix_user
from tests.fakes.mattermost_server import TOKEN as MATTERMOST_TOKEN
from tests.fakes.mattermost_server import FakeMattermost
from tests.fakes.mattermost_server import Fault as MattermostFault
from tests.fakes.slack_server import FakeSlack, SlackFault
from tests.fakes.telegram_server import FakeTelegram, Fault

Button = tuple[str, str, str]  # (message id, label, command)


class Driver:
    """The abilities a scenario may use; a platform overrides the ones it has."""

    name: ClassVar[str]
    fixture: ClassVar[str | None] = None  # the fake's fixture, if the platform has a server
    limit: ClassVar[int]  # characters per message, as the platform counts them
    # four people's platform ids: [0] the person most scenarios use (the admin where there
    # is one), [1] a second person (a member), [2] and [3] strangers
    users: ClassVar[tuple[str, str, str, str]]
    records_refused: ClassVar[bool] = True  # `texts` includes a send refused with a 429
    durations: ClassVar[bool] = True  # the platform says how long a voice note is
    env: ClassVar[dict[str, str]] = {}

    def __init__(self, fake: Any = None) -> None:
        self.fake = fake

    @classmethod
    def can(cls, *abilities: str) -> bool:
        return all(getattr(cls, a) is not getattr(Driver, a) for a in abilities)

    @property
    def user(self) -> str:
        """The person a one-person scenario is about."""
        return self.users[0]

    def replies(self) -> list[str]:
        """What the bot posted in `user`'s direct chat."""
        return self.texts_to(self.dm_of(self.user))

    # -- the adapter --------------------------------------------------------------------

    def adapter(self, menu: list[MenuEntry]) -> PlatformAdapter:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """Its `platforms.<name>` section, for a gateway that builds it from config."""
        raise NotImplementedError

    def ready(self) -> None:
        """Blocks until the adapter is listening (nothing to wait for on most)."""

    # -- what a person does -------------------------------------------------------------

    def dm_of(self, user: str) -> str:
        """The chat id of `user`'s direct chat with the bot."""
        raise NotImplementedError

    def say(self, user: str, text: str) -> Any:
        """A direct message to the bot; returns what `redeliver` needs."""
        raise NotImplementedError

    def redeliver(self, delivery: Any) -> None:
        raise NotImplementedError

    def send_photo(self, user: str) -> None:
        """A photo without text whose file the platform never hands over."""
        raise NotImplementedError

    def photo(self, data: bytes, caption: str) -> None:
        raise NotImplementedError

    def voice(self, data: bytes, seconds: float) -> None:
        raise NotImplementedError

    def document(self, data: bytes, name: str, mime: str, size: int | None = None) -> None:
        raise NotImplementedError

    def press(self, chat: str, message: str, command: str, user: str) -> None:
        raise NotImplementedError

    # -- what the bot did ---------------------------------------------------------------

    def texts(self) -> list[str]:
        """Every message the bot posted (or tried to), in order."""
        raise NotImplementedError

    def texts_to(self, chat: str) -> list[str]:
        raise NotImplementedError

    def shown(self) -> list[str]:
        """What the bot's messages show now, oldest first (a streamed reply edited to its
        end; a deleted one gone)."""
        raise NotImplementedError

    def message_text(self, chat: str, message: str) -> str:
        raise NotImplementedError

    def buttons(self, chat: str) -> list[Button]:
        """The buttons the bot's messages in `chat` carry now."""
        raise NotImplementedError

    def edit_times(self) -> list[float]:
        raise NotImplementedError

    def edit_texts(self) -> list[str]:
        raise NotImplementedError

    def render(self, text: str) -> str:
        """`text` as the bot's message shows it (the platform's markup)."""
        raise NotImplementedError

    def downloads(self) -> int:
        raise NotImplementedError

    def files(self, user: str) -> list[tuple[str, bytes, str]]:
        """The files the bot sent in `user`'s direct chat, in order: (name, the bytes as
        the platform stored them, caption)."""
        raise NotImplementedError

    # -- how the platform misbehaves ----------------------------------------------------

    def fail_next_send(self, seconds: float) -> None:
        """The next send is refused with a 429 asking to wait `seconds`."""
        raise NotImplementedError

    def fail_next_send_5xx(self) -> None:
        raise NotImplementedError

    def fault_next_edit(self) -> None:
        """The next edit is refused with a 429 asking to wait 1 s."""
        raise NotImplementedError

    def break_downloads(self) -> None:
        raise NotImplementedError

    def fail_next_upload(self) -> None:
        """The next file upload is refused with a 429 asking to wait 1 s."""
        raise NotImplementedError

    def drop(self) -> None:
        """The connection drops; returns once the adapter is connected again."""
        raise NotImplementedError


class TelegramDriver(Driver):
    name, fixture, limit = "telegram", "telegram", 4096
    users = ("42", "43", "77", "78")
    env: ClassVar[dict[str, str]] = {"TG_TOKEN": "123:ABC"}
    fake: FakeTelegram

    def adapter(self, menu: list[MenuEntry]) -> PlatformAdapter:
        from adapters.telegram.adapter import TelegramAdapter

        return TelegramAdapter("123:ABC", base_url=self.fake.base_url, poll_timeout=1, menu=menu)

    def config(self) -> dict[str, Any]:
        return {"token_env": "TG_TOKEN", "base_url": self.fake.base_url}

    def dm_of(self, user: str) -> str:
        return user

    def say(self, user: str, text: str) -> Any:
        return self.fake.user_message(text, user_id=int(user))

    def redeliver(self, delivery: Any) -> None:
        self.fake.redeliver(delivery)

    def send_photo(self, user: str) -> None:
        size = {"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1}
        self.fake.user_message("", user_id=int(user), extra={"photo": [size]})

    def photo(self, data: bytes, caption: str) -> None:
        sizes = [{**self.fake.add_file(data, "photos/p.jpg"), "width": 800, "height": 600}]
        extra: dict[str, Any] = {"photo": sizes, **({"caption": caption} if caption else {})}
        self.fake.user_message("", user_id=int(self.users[0]), extra=extra)

    def voice(self, data: bytes, seconds: float) -> None:
        item = {**self.fake.add_file(data, "voice/v.ogg"), "duration": seconds}
        item["mime_type"] = "audio/ogg"
        self.fake.user_message("", user_id=int(self.users[0]), extra={"voice": item})

    def document(self, data: bytes, name: str, mime: str, size: int | None = None) -> None:
        item = self.fake.add_file(data, f"documents/{name}", size=size)
        item.update(file_name=name, mime_type=mime)
        self.fake.user_message("", user_id=int(self.users[0]), extra={"document": item})

    def press(self, chat: str, message: str, command: str, user: str) -> None:
        self.fake.press(int(chat), int(message), command, user_id=int(user))

    def texts(self) -> list[str]:
        return [str(p["text"]) for p in self.fake.sent()]

    def texts_to(self, chat: str) -> list[str]:
        return [str(p["text"]) for p in self.fake.sent() if str(p["chat_id"]) == chat]

    def shown(self) -> list[str]:
        return [text for _, text in sorted(dict(self.fake.messages).items())]

    def message_text(self, chat: str, message: str) -> str:
        return self.fake.messages.get((int(chat), int(message)), "")

    def buttons(self, chat: str) -> list[Button]:
        tg = self.fake
        latest = {mid: tg.keyboard(params) for c, mid, params in list(tg.posts) if str(c) == chat}
        for method, params in list(tg.calls):
            if method == "editMessageText" and str(params["chat_id"]) == chat:
                latest[int(params["message_id"])] = tg.keyboard(params)
        return [(str(mid), label, data) for mid, row in latest.items() for label, data in row]

    def edit_times(self) -> list[float]:
        return [at for method, at in self.fake.timeline if method == "editMessageText"]

    def edit_texts(self) -> list[str]:
        return [str(p["text"]) for p in self.fake.sent("editMessageText")]

    def render(self, text: str) -> str:
        from adapters.telegram.render import to_telegram_html

        return to_telegram_html(text)

    def downloads(self) -> int:
        return len(self.fake.downloads)

    def files(self, user: str) -> list[tuple[str, bytes, str]]:
        return [(n, data, c) for chat, n, _, data, c in self.fake.documents if str(chat) == user]

    def fail_next_send(self, seconds: float) -> None:
        fault = Fault("sendMessage", 429, "Too Many Requests", retry_after=int(seconds))
        self.fake.faults.append(fault)

    def fail_next_upload(self) -> None:
        self.fake.faults.append(Fault("sendDocument", 429, "Too Many Requests", retry_after=1))

    def fail_next_send_5xx(self) -> None:
        self.fake.faults.append(Fault("sendMessage", 502, "Bad Gateway"))

    def fault_next_edit(self) -> None:
        fault = Fault("editMessageText", 429, "Too Many Requests: retry after 1", retry_after=1)
        self.fake.faults.append(fault)

    def break_downloads(self) -> None:
        tg = self.fake
        tg.broken_downloads.update(path for path, _ in tg.files.values())
        tg.broken_downloads.update({"documents/report.txt", "photos/p.jpg", "voice/v.ogg"})

    def drop(self) -> None:
        self.fake.faults.append(Fault("getUpdates", drop=True))
        self.fake.faults.append(Fault("getUpdates", 502, "Bad Gateway"))
        time.sleep(0.5)  # the poll after the dropped one (no reconnect event to wait for)


class SlackDriver(Driver):
    name, fixture, limit = "slack", "slack", 40_000
    users = ("U1", "U2", "U7", "U8")
    env: ClassVar[dict[str, str]] = {"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_APP_TOKEN": "xapp-t"}
    fake: FakeSlack

    def adapter(self, menu: list[MenuEntry]) -> PlatformAdapter:
        from adapters.slack.adapter import SlackAdapter

        return SlackAdapter("xoxb-t", "xapp-t", api_base=self.fake.api_base)

    def config(self) -> dict[str, Any]:
        return {"api_base": self.fake.api_base}

    def ready(self) -> None:
        self.fake.wait_connected()

    def dm_of(self, user: str) -> str:
        return f"D{user}"

    def say(self, user: str, text: str) -> Any:
        return self.fake.message(text, user=user, channel=self.dm_of(user))

    def _share(self, text: str, *files: dict[str, Any]) -> None:
        user = self.users[0]
        self.fake.message(text, user=user, channel=self.dm_of(user), files=list(files))

    def redeliver(self, delivery: Any) -> None:
        self.fake.push(delivery, 1)

    def send_photo(self, user: str) -> None:
        ts = f"1700000999.{time.monotonic_ns() % 1_000_000:06d}"
        event = {
            "type": "message",
            "user": user,
            "text": "",
            "ts": ts,
            "channel": self.dm_of(user),
            "channel_type": "im",
            "event_ts": ts,
            "files": [{"id": "F1", "name": "cat.png"}],  # no url_private: nothing to fetch
        }
        body = {"type": "event_callback", "event": event, "event_id": f"EvP{ts}"}
        self.fake.push({"token": "x", "team_id": "T1", "api_app_id": "A1", **body})

    def photo(self, data: bytes, caption: str) -> None:
        self._share(caption, self.fake.add_file(data, "p.jpg", "image/jpeg"))

    def voice(self, data: bytes, seconds: float) -> None:
        item = {**self.fake.add_file(data, "audio_message.webm", "audio/webm")}
        item.update(subtype="slack_audio", duration_ms=int(seconds * 1000))
        self._share("", item)

    def document(self, data: bytes, name: str, mime: str, size: int | None = None) -> None:
        self._share("", self.fake.add_file(data, name, mime, size=size))

    def press(self, chat: str, message: str, command: str, user: str) -> None:
        self.fake.press(chat, message, command, user=user)

    def texts(self) -> list[str]:
        return [str(p["text"]) for p in self.fake.posted()]

    def texts_to(self, chat: str) -> list[str]:
        return [str(p["text"]) for p in self.fake.posted() if p.get("channel") == chat]

    def shown(self) -> list[str]:
        return [text for _, text in sorted(dict(self.fake.messages).items())]

    def message_text(self, chat: str, message: str) -> str:
        return self.fake.messages.get((chat, message), "")

    def buttons(self, chat: str) -> list[Button]:
        slack = self.fake
        latest = {ts: _blocks(params) for c, ts, params in list(slack.posts) if c == chat}
        for method, params in list(slack.calls):
            if method == "chat.update" and params.get("channel") == chat:
                latest[str(params["ts"])] = _blocks(params)
        return [
            (ts, e["text"]["text"], e["value"])
            for ts, blocks in latest.items()
            for block in blocks
            if block.get("type") == "actions"
            for e in block["elements"]
        ]

    def edit_times(self) -> list[float]:
        return [at for method, at in self.fake.timeline if method == "chat.update"]

    def edit_texts(self) -> list[str]:
        return [str(p["text"]) for m, p in self.fake.calls if m == "chat.update"]

    def render(self, text: str) -> str:
        from adapters.slack.render import to_slack_mrkdwn

        return to_slack_mrkdwn(text)

    def downloads(self) -> int:
        return len(self.fake.downloads)

    def files(self, user: str) -> list[tuple[str, bytes, str]]:
        chat = self.dm_of(user)
        return [(name, data, note) for c, name, data, note, _ in self.fake.shared if c == chat]

    def fail_next_send(self, seconds: float) -> None:
        fault = SlackFault("chat.postMessage", 429, "ratelimited", retry_after=int(seconds))
        self.fake.faults.append(fault)

    def fail_next_upload(self) -> None:
        self.fake.faults.append(SlackFault("files.getUploadURLExternal", 429, "ratelimited", 1))

    def fail_next_send_5xx(self) -> None:
        fault = SlackFault("chat.postMessage", 502, "bad_gateway", retry_after=None)
        self.fake.faults.append(fault)

    def fault_next_edit(self) -> None:
        self.fake.faults.append(SlackFault("chat.update", 429, "ratelimited", 1))

    def break_downloads(self) -> None:
        self.fake.broken_downloads.update(
            f"F{n}/{name}" for n in range(1, 9) for name in ("report.txt", "p.jpg")
        )

    def drop(self) -> None:
        before = self.fake.connections
        self.fake.drop_connections()
        self.fake.wait_connected(before + 1, 30)


def _blocks(params: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = params.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


class DiscordDriver(Driver):
    name, fixture, limit = "discord", "discord_fake", 2000
    users = (
        "700000000000000001",
        "700000000000000002",
        "700000000000000007",
        "700000000000000008",
    )
    records_refused = False  # discord.py waits out a 429 itself, before sending again
    env: ClassVar[dict[str, str]] = {"DISCORD_TOKEN": "bot-token"}
    fake: FakeDiscord

    def adapter(self, menu: list[MenuEntry]) -> PlatformAdapter:
        from adapters.discord.adapter import DiscordAdapter

        fake = self.fake
        return DiscordAdapter(
            "bot-token", api_base=fake.api_base, gateway_url=fake.gateway_url, menu=menu
        )

    def config(self) -> dict[str, Any]:
        fake = self.fake
        return {
            "token_env": "DISCORD_TOKEN",
            "api_base": fake.api_base,
            "gateway_url": fake.gateway_url,
        }

    def ready(self) -> None:
        """discord.py has identified on the gateway socket (a message dispatched before
        that reaches nobody); a gateway process just started may take a while."""
        self.fake.wait_ready(1, 60)

    def dm_of(self, user: str) -> str:
        return f"6{user[1:]}"

    def say(self, user: str, text: str) -> Any:
        return self.fake.message(text, user=user)

    def _share(self, text: str, *attachments: dict[str, Any]) -> None:
        self.fake.message(text, user=self.users[0], attachments=list(attachments))

    def redeliver(self, delivery: Any) -> None:
        self.fake.dispatch("MESSAGE_CREATE", delivery)

    def send_photo(self, user: str) -> None:
        attachment = {"id": "9", "filename": "cat.png", "size": 10}  # its URL leads nowhere
        self.fake.message("", user=user, attachments=[attachment])

    def photo(self, data: bytes, caption: str) -> None:
        self._share(caption, self.fake.add_attachment(data, "p.jpg", "image/jpeg"))

    def voice(self, data: bytes, seconds: float) -> None:
        item = self.fake.add_attachment(
            data, "voice-message.ogg", "audio/ogg", duration_secs=seconds, flags=8192
        )
        self._share("", item)

    def document(self, data: bytes, name: str, mime: str, size: int | None = None) -> None:
        self._share("", self.fake.add_attachment(data, name, mime, size=size))

    def press(self, chat: str, message: str, command: str, user: str) -> None:
        self.fake.press(chat, message, command, user)

    def texts(self) -> list[str]:
        return [str(p["content"]) for p in self.fake.posted]

    def texts_to(self, chat: str) -> list[str]:
        return [str(p["content"]) for p in self.fake.posted if p.get("channel_id") == chat]

    def shown(self) -> list[str]:
        messages = sorted(dict(self.fake.messages).items(), key=lambda i: int(i[0][1]))
        return [text for _, text in messages]

    def message_text(self, chat: str, message: str) -> str:
        return self.fake.messages.get((chat, message), "")

    def buttons(self, chat: str) -> list[Button]:
        fake = self.fake
        latest = {
            p["message_id"]: p.get("components") or []
            for p in list(fake.posted)
            if p["channel_id"] == chat
        }
        for edit in list(fake.edits):
            if edit["channel_id"] == chat and "components" in edit:
                latest[edit["id"]] = edit["components"]
        return [
            (mid, c["label"], c["custom_id"])
            for mid, rows in latest.items()
            for row in rows
            for c in row.get("components", [])
        ]

    def edit_times(self) -> list[float]:
        return [at for what, at in self.fake.timeline if what.startswith("PATCH /channels")]

    def edit_texts(self) -> list[str]:
        return [str(e["content"]) for e in self.fake.edits]

    def render(self, text: str) -> str:
        return text  # Discord shows Markdown as written

    def downloads(self) -> int:
        return len(self.fake.downloads)

    def files(self, user: str) -> list[tuple[str, bytes, str]]:
        chat = self.dm_of(user)
        return [
            (str(f["filename"]), f["data"], str(p.get("content") or ""))
            for p in list(self.fake.posted)
            if p["channel_id"] == chat
            for f in p.get("files") or ()
        ]

    def fail_next_send(self, seconds: float) -> None:
        self.fake.faults.append(DiscordFault("/messages", 429, seconds))

    def fail_next_upload(self) -> None:
        self.fake.faults.append(DiscordFault("/messages", 429, 1.0, method="POST"))

    def fail_next_send_5xx(self) -> None:
        self.fake.faults.append(DiscordFault("/messages", 502, 0))

    def fault_next_edit(self) -> None:
        self.fake.faults.append(DiscordFault("", 429, 1.0, method="PATCH"))

    def break_downloads(self) -> None:
        self.fake.broken_downloads.update(self.fake.files)
        self.fake.broken_names.add("report.txt")  # one sent later, whatever its id

    def drop(self) -> None:
        before = len(self.fake.identifies) + self.fake.resumes
        self.fake.drop_connections()
        self.fake.wait_ready(before + 1, 30)


class CliDriver(Driver):
    """The terminal: the local owner types a line and reads the reply (`hermes chat`);
    it has no server and no second person; files the assistant sends are saved in a
    folder of its own (as in the directory `hermes chat` was started in)."""

    name, limit = "cli", sys.maxsize
    users = ("local", "local", "local", "local")

    def __init__(self, fake: Any = None) -> None:
        super().__init__(fake)
        self.folder = Path(tempfile.mkdtemp(prefix="hermes-cli-files-"))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._adapter: Any = None
        self._answers: list[str] = []
        self._ids = itertools.count()

    def adapter(self, menu: list[MenuEntry]) -> PlatformAdapter:
        from adapters.cli.adapter import CliAdapter

        self._loop, self._adapter = asyncio.get_running_loop(), CliAdapter(self.folder)
        return self._adapter  # type: ignore[no-any-return]

    def say(self, user: str, text: str) -> Any:
        """Typed at the prompt; the reply is read as the chat loop reads it."""
        assert self._loop is not None, "the terminal adapter is not built"

        async def ask() -> None:
            answer = await self._adapter.ask(text)
            self._answers.append(answer.text)

        return asyncio.run_coroutine_threadsafe(ask(), self._loop)

    def texts(self) -> list[str]:
        notices = list(self._adapter.notices) if self._adapter is not None else []
        return [*self._answers, *notices]

    def shown(self) -> list[str]:
        return self.texts()  # one message per reply, its final text

    def files(self, user: str) -> list[tuple[str, bytes, str]]:
        """The files saved, oldest first; the caption is the notice's first line when
        the notice has two (caption, then where the file went)."""
        found = []
        for notice in self.texts():
            *caption, last = notice.split("\n")
            saved = re.fullmatch(r"📎 Saved (.+) to (.+)", last)
            if saved is not None:
                path = Path(saved.group(2))
                found.append((path.name, path.read_bytes(), "\n".join(caption)))
        return found


class MattermostDriver(Driver):
    """Mattermost's REST API and websocket (tests/fakes/mattermost_server.py). Its
    buttons' presses are POSTed by the server to the adapter's route, served beside the
    gateway (its address known once it listens: `ready`)."""

    name, fixture, limit = "mattermost", "mattermost", 16_383
    users = (
        "a1ice000000000000000000000",
        "b0b00000000000000000000000",
        "s7ranger000000000000000000",
        "s8ranger000000000000000000",
    )
    env: ClassVar[dict[str, str]] = {"MATTERMOST_TOKEN": MATTERMOST_TOKEN}
    durations = False  # a file's info has no length: a recording is measured once read
    fake: FakeMattermost

    def adapter(self, menu: list[MenuEntry]) -> PlatformAdapter:
        from adapters.mattermost.adapter import MattermostAdapter

        self._adapter = MattermostAdapter(
            self.fake.url, MATTERMOST_TOKEN, actions_url="http://127.0.0.1:0/mattermost/actions"
        )
        return self._adapter

    def config(self) -> dict[str, Any]:
        return {"url": self.fake.url}

    _adapter: Any = None  # the adapter this driver built (a gateway from config has its own)

    def ready(self) -> None:
        self.fake.wait_connected()
        if self._adapter is not None and (served := SERVED_AT.get(None)) is not None:
            self._adapter.actions_url = f"{served}/mattermost/actions"

    def press(self, chat: str, message: str, command: str, user: str) -> None:
        actions = self.fake.first_actions[message]
        index = next(
            n for n, a in enumerate(actions) if a["integration"]["context"]["command"] == command
        )
        self.fake.press(message, index, user, wait=False)  # called on the gateway's loop

    def buttons(self, chat: str) -> list[Button]:
        return [
            (str(post["id"]), str(action["name"]), str(action["integration"]["context"]["command"]))
            for post in self.fake.bot_posts(chat)
            for attachment in (post.get("props") or {}).get("attachments") or []
            for action in attachment.get("actions") or []
        ]

    def dm_of(self, user: str) -> str:
        return f"dm-{user}"

    def say(self, user: str, text: str) -> Any:
        return self.fake.say(user, text)

    def redeliver(self, delivery: Any) -> None:
        self.fake.redeliver(str(delivery))

    def _share(self, text: str, name: str, mime: str, data: bytes, size: int | None = None) -> None:
        file = (name, mime, data) if size is None else (name, mime, data, size)
        self.fake.say(self.users[0], text, files=[file])

    def send_photo(self, user: str) -> None:
        self.fake.say(user, "", files=[("cat.png", "image/png", b"")])
        self.fake.files.clear()  # the server no longer has it: nothing to fetch

    def photo(self, data: bytes, caption: str) -> None:
        self._share(caption, "p.jpg", "image/jpeg", data)

    def voice(self, data: bytes, seconds: float) -> None:
        self._share("", "voice.ogg", "audio/ogg", data)

    def document(self, data: bytes, name: str, mime: str, size: int | None = None) -> None:
        self._share("", name, mime, data, size)

    def texts(self) -> list[str]:
        return [
            str(body.get("message", ""))
            for method, path, body in list(self.fake.calls)
            if method == "POST" and path == "/api/v4/posts"
        ]

    def texts_to(self, chat: str) -> list[str]:
        return [
            str(body.get("message", ""))
            for method, path, body in list(self.fake.calls)
            if method == "POST" and path == "/api/v4/posts" and body.get("channel_id") == chat
        ]

    def shown(self) -> list[str]:
        return [str(p["message"]) for p in self.fake.bot_posts()]

    def message_text(self, chat: str, message: str) -> str:
        post = self.fake.posts.get(message)
        return str(post["message"]) if post is not None else ""

    def edit_times(self) -> list[float]:
        return list(self.fake.edit_times)

    def edit_texts(self) -> list[str]:
        return [
            str(body.get("message", ""))
            for method, path, body in list(self.fake.calls)
            if method == "PUT" and path.endswith("/patch")
        ]

    def render(self, text: str) -> str:
        return text  # Mattermost shows Markdown as it is written

    def downloads(self) -> int:
        return self.fake.downloads

    def files(self, user: str) -> list[tuple[str, bytes, str]]:
        return [(n, data, text) for n, _, data, text in self.fake.sent_files(self.dm_of(user))]

    def fail_next_send(self, seconds: float) -> None:
        self.fake.faults.append(MattermostFault("/api/v4/posts", 429, int(seconds), "POST"))

    def fail_next_upload(self) -> None:
        self.fake.faults.append(MattermostFault("/api/v4/files", 429, 1, "POST"))

    def fail_next_send_5xx(self) -> None:
        self.fake.faults.append(MattermostFault("/api/v4/posts", 502, None, "POST"))

    def fault_next_edit(self) -> None:
        self.fake.faults.append(MattermostFault("/api/v4/posts/", 429, 1, "PUT"))

    def break_downloads(self) -> None:
        self.fake.broken_downloads = True

    def drop(self) -> None:
        before = self.fake.connections
        self.fake.drop()
        self.fake.wait_connected(before + 1, 30)


class MatrixDriver(Driver):
    """A homeserver's client-server API (tests/fakes/matrix_server.py), through
    matrix-nio. Buttons are numbered keys: a press is a reaction with the key."""

    name, fixture, limit = "matrix", "matrix", 16_000
    users = (
        matrix_user("alice"),
        matrix_user("bob"),
        matrix_user("stranger1"),
        matrix_user("stranger2"),
    )
    env: ClassVar[dict[str, str]] = {"MATRIX_ACCESS_TOKEN": MATRIX_TOKEN}
    fake: FakeMatrix
    SEND = "/send/m.room.message/"

    def adapter(self, menu: list[MenuEntry]) -> PlatformAdapter:
        from adapters.matrix.adapter import MatrixAdapter

        return MatrixAdapter(self.fake.url, MATRIX_BOT, MATRIX_TOKEN)

    def config(self) -> dict[str, Any]:
        return {"homeserver": self.fake.url, "user_id": MATRIX_BOT}

    def ready(self) -> None:
        self.fake.wait_synced()
        for known in self.users[:2]:  # the admin and the member have talked to the bot
            self.fake.dm(known)

    def dm_of(self, user: str) -> str:
        return self.fake.dm(user, make=False)  # the bot may be the one to open it

    def say(self, user: str, text: str) -> Any:
        return self.fake.say(user, text)

    def redeliver(self, delivery: Any) -> None:
        self.fake.redeliver(str(delivery))

    def send_photo(self, user: str) -> None:
        self.fake.say(user, "", file=("cat.png", "image/png", b""))
        self.fake.media.clear()  # the homeserver no longer has it: nothing to fetch

    def photo(self, data: bytes, caption: str) -> None:
        self.fake.say(self.users[0], caption, file=("p.jpg", "image/jpeg", data))

    def voice(self, data: bytes, seconds: float) -> None:
        voice = ("voice.ogg", "audio/ogg", data, len(data), int(seconds * 1000), True)
        self.fake.say(self.users[0], "", file=voice)

    def document(self, data: bytes, name: str, mime: str, size: int | None = None) -> None:
        self.fake.say(
            self.users[0], "", file=(name, mime, data, len(data) if size is None else size)
        )

    def press(self, chat: str, message: str, command: str, user: str) -> None:
        sent = self.fake.event(message)["content"].get(MATRIX_BUTTONS) or []  # as first sent:
        key = next(b["key"] for b in sent if b["command"] == command)  # a key stays pressable
        self.fake.react(user, chat, message, key)

    def _sent(self, chat: str = "") -> list[dict[str, Any]]:
        """What the bot asked to post (refused requests included), edits left out."""
        return [
            body
            for method, path, body in list(self.fake.calls)
            if method == "PUT"
            and self.SEND in path
            and (not chat or f"/rooms/{chat}/" in path)
            and ((body or {}).get("m.relates_to") or {}).get("rel_type") != "m.replace"
        ]

    def texts(self) -> list[str]:
        return [str(body.get("body", "")) for body in self._sent()]

    def texts_to(self, chat: str) -> list[str]:
        return [str(body.get("body", "")) for body in self._sent(chat)]

    def shown(self) -> list[str]:
        return [str(e["content"].get("body", "")) for e in self.fake.shown()]

    def message_text(self, chat: str, message: str) -> str:
        return self.fake.text_of(message)

    def buttons(self, chat: str) -> list[Button]:
        return [
            (str(event["event_id"]), str(b["label"]), str(b["command"]))
            for event in self.fake.shown(chat)
            for b in event["content"].get(MATRIX_BUTTONS) or []
        ]

    def edit_times(self) -> list[float]:
        return list(self.fake.edit_times)

    def edit_texts(self) -> list[str]:
        return [
            str(((body or {}).get("m.new_content") or {}).get("body", ""))
            for method, path, body in list(self.fake.calls)
            if method == "PUT"
            and self.SEND in path
            and ((body or {}).get("m.relates_to") or {}).get("rel_type") == "m.replace"
        ]

    def render(self, text: str) -> str:
        return text  # the body is the Markdown as written (its HTML beside it)

    def downloads(self) -> int:
        return self.fake.downloads

    def files(self, user: str) -> list[tuple[str, bytes, str]]:
        found = []
        for content in self.fake.sent_files(self.dm_of(user)):
            name = str(content.get("filename") or content["body"])
            caption = str(content["body"]) if content["body"] != name else ""
            found.append((name, content["data"], caption))
        return found

    def fail_next_send(self, seconds: float) -> None:
        fault = MatrixFault(self.SEND, 429, int(seconds * 1000), "PUT", edits=False)
        self.fake.faults.append(fault)

    def fail_next_upload(self) -> None:
        self.fake.faults.append(MatrixFault("/media/v3/upload", 429, 1000, "POST"))

    def fail_next_send_5xx(self) -> None:
        self.fake.faults.append(MatrixFault(self.SEND, 502, None, "PUT", edits=False))

    def fault_next_edit(self) -> None:
        self.fake.faults.append(MatrixFault(self.SEND, 429, 1000, "PUT", edits=True))

    def break_downloads(self) -> None:
        self.fake.broken_downloads = True

    def drop(self) -> None:
        before = self.fake.syncs
        self.fake.drop()
        self.fake.wait_synced(before + 1, 30)


DRIVERS: tuple[type[Driver], ...] = (
    TelegramDriver,
    SlackDriver,
    DiscordDriver,
    MattermostDriver,
    MatrixDriver,
    CliDriver,
)
SERVED = tuple(d for d in DRIVERS if d.fixture is not None)  # the platforms with a server


def platforms_with(*abilities: str, among: tuple[type[Driver], ...] = DRIVERS) -> list[str]:
    """The platforms whose drivers have every one of `abilities`."""
    return [d.name for d in among if d.can(*abilities)]


def needs(*abilities: str, fixture: str = "platform") -> pytest.MarkDecorator:
    """Run a test on the platforms that have `abilities` (its `fixture` parametrized)."""
    return pytest.mark.parametrize(fixture, platforms_with(*abilities), indirect=True)


def by_name(name: str) -> type[Driver]:
    return next(d for d in DRIVERS if d.name == name)


def driver_for(request: pytest.FixtureRequest) -> Driver:
    """The driver named by a parametrized fixture's param, its fake started."""
    cls = by_name(request.param)
    return cls(request.getfixturevalue(cls.fixture) if cls.fixture else None)


__all__ = [
    "DRIVERS",
    "SERVED",
    "CliDriver",
    "DiscordDriver",
    "Driver",
    "MatrixDriver",
    "MattermostDriver",
    "SlackDriver",
    "TelegramDriver",
    "by_name",
    "driver_for",
    "needs",
    "platforms_with",
]
