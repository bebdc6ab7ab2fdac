"""The Mattermost adapter against a local Mattermost (REST API v4 and its websocket)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from adapters.mattermost.adapter import MattermostAdapter
from gateway.edge.events import Attachment, Button, ChatRef, ChatType, MessageEvent, OutboundMessage
from gateway.edge.http_server import HttpServer
from gateway.edge.ports import CatchesUp, ChatMark, DownloadError
from tests.fakes.mattermost_server import BOT, TOKEN, FakeMattermost, Fault
from tests.harness.wait import until, until_count

ALICE = "a1ice000000000000000000000"
BOB = "b0b00000000000000000000000"


@pytest.fixture
def fake() -> Iterator[FakeMattermost]:
    server = FakeMattermost().start()
    yield server
    server.stop()


@asynccontextmanager
async def running(
    fake: FakeMattermost, *, buttons: bool = False
) -> AsyncIterator[tuple[MattermostAdapter, list[MessageEvent], str]]:
    """The adapter started against the fake (its action route served when `buttons`),
    the events it delivered, and the gateway's address."""
    server = HttpServer("127.0.0.1", 0, dict)
    actions = "http://127.0.0.1:0/mattermost/actions" if buttons else None
    adapter = MattermostAdapter(fake.url, TOKEN, actions_url=actions)
    for route in adapter.routes():
        server.add(route)
    await server.start()
    base = f"http://127.0.0.1:{server.port}"
    if buttons:  # the address known once the server listens
        adapter.actions_url = f"{base}/mattermost/actions"
    events: list[MessageEvent] = []

    async def sink(event: MessageEvent) -> None:
        events.append(event)

    await adapter.start(sink)
    try:
        yield adapter, events, base
    finally:
        await adapter.stop()
        await server.stop()


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


async def arrived(events: list[MessageEvent], n: int) -> None:
    await until_count(lambda: events, n, "events", timeout=5)


def test_a_dm_and_a_mention_in_a_channel_become_events_and_replies_go_where_they_belong(
    fake: FakeMattermost,
) -> None:
    async def body() -> None:
        async with running(fake) as (adapter, events, _):
            assert isinstance(adapter, CatchesUp)
            said = await asyncio.to_thread(fake.say, ALICE, "hello there")
            await arrived(events, 1)
            dm = events[0]
            assert (dm.platform, dm.message_id, dm.text, dm.chat.type) == (
                "mattermost",
                said,
                "hello there",
                ChatType.DM,
            )
            assert dm.user.id == ALICE and dm.user.display_name == ALICE and dm.order > 0
            sent = await adapter.send(OutboundMessage(dm.chat, "**hi**", reply_to_id=said))
            assert sent.ok and fake.texts(dm.chat.id) == ["**hi**"]
            assert fake.bot_posts()[0]["root_id"] == ""  # a DM is not threaded
            # a mention in a channel (by the mentions list and by name, stripped from the text)
            asked = await asyncio.to_thread(
                fake.say,
                BOB,
                "@hermes what time is it?",
                channel="town",
                channel_type="O",
                mentions=[BOT],
            )
            await arrived(events, 2)
            assert events[1].mentioned and events[1].text == "what time is it?"
            assert events[1].chat == ChatRef("town", ChatType.CHANNEL)
            reply = await adapter.send(OutboundMessage(events[1].chat, "noon", reply_to_id=asked))
            assert reply.ok and fake.bot_posts("town")[0]["root_id"] == asked  # in its thread
            plain = await asyncio.to_thread(
                fake.say, BOB, "just chatting", channel="town", channel_type="O"
            )
            await arrived(events, 3)
            # the bot's own two posts were broadcast before it on the same websocket: none
            # of them became an event
            assert len(events) == 3 and events[2].message_id == plain and not events[2].mentioned
            await adapter.typing(dm.chat)
            assert fake.typing == [dm.chat.id]

    run(body)


def test_streamed_edits_deletes_and_refusals_say_whether_to_send_again(
    fake: FakeMattermost,
) -> None:
    async def body() -> None:
        async with running(fake) as (adapter, events, _):
            await asyncio.to_thread(fake.say, ALICE, "hi")
            await arrived(events, 1)
            chat = events[0].chat
            first = await adapter.send(OutboundMessage(chat, "Here is", partial=True))
            post_id = first.message_ids[0]
            edited = await adapter.edit(chat, post_id, OutboundMessage(chat, "Here is the answer"))
            assert edited.ok and fake.posts[post_id]["message"] == "Here is the answer"
            assert (await adapter.delete(chat, post_id)).ok and post_id not in fake.posts
            fake.faults.append(Fault("/api/v4/posts", 429, retry_after=3))
            limited = await adapter.send(OutboundMessage(chat, "again"))
            assert (limited.ok, limited.retryable, limited.retry_after) == (False, True, 3.0)
            fake.faults.append(Fault("/api/v4/posts", 500, retry_after=None))
            assert (await adapter.send(OutboundMessage(chat, "again"))).retryable
            refused = await adapter.send(OutboundMessage(ChatRef("nowhere", ChatType.CHANNEL), "x"))
            assert not refused.ok and not refused.retryable and "403" in (refused.error or "")
            gone = await adapter.edit(chat, post_id, OutboundMessage(chat, "late"))
            assert not gone.ok and not gone.retryable

    run(body)


def test_a_button_press_comes_through_mattermost_signed_and_a_forged_one_is_refused(
    fake: FakeMattermost,
) -> None:
    async def body() -> None:
        async with running(fake, buttons=True) as (adapter, events, base):
            assert adapter.capabilities.buttons
            await asyncio.to_thread(fake.say, ALICE, "hi")
            await arrived(events, 1)
            buttons = (
                Button("Approve", "/admin approve K7", "primary"),
                Button("Deny", "/admin deny K7"),
            )
            sent = await adapter.send(
                OutboundMessage(events[0].chat, "Let Bo in?", buttons=buttons)
            )
            post_id = sent.message_ids[0]
            # what clients read has no integration (URL and context stay on the server)
            shown = fake.calls[-1]
            assert shown[0] == "POST" and "integration" in str(shown[2])
            status, _ = await asyncio.to_thread(fake.press, post_id, 1, ALICE)
            assert status == 200
            await arrived(events, 2)
            press = events[1]
            assert press.pressed and press.text == "/admin deny K7" and press.user.id == ALICE
            assert press.reply_to_id == post_id and press.chat.type is ChatType.DM
            # someone who POSTs to the address with a context of their own
            forged = {
                "user_id": BOB,
                "channel_id": events[0].chat.id,
                "post_id": post_id,
                "context": {"command": "/admin role bob owner", "sig": "0" * 64},
            }
            async with aiohttp.ClientSession() as session:
                async with session.post(f"{base}/mattermost/actions", json=forged) as response:
                    assert response.status == 403
                async with session.post(f"{base}/mattermost/actions", data=b"[1") as response:
                    assert response.status == 400
            assert len(events) == 2
            removed = await adapter.edit(
                events[0].chat, post_id, OutboundMessage(events[0].chat, "Approved", buttons=())
            )
            assert removed.ok and fake.posts[post_id]["props"] == {"attachments": []}

    run(body)


def test_after_the_websocket_drops_it_reconnects_and_the_posts_meanwhile_are_caught_up(
    fake: FakeMattermost,
) -> None:
    async def body() -> None:
        async with running(fake) as (adapter, events, _):
            seen = await asyncio.to_thread(fake.say, ALICE, "before")
            await arrived(events, 1)
            mark = ChatMark(events[0].chat, seen, events[0].order)
            fake.drop()
            await until(lambda: fake.connections == 2, "a reconnection", timeout=10)
            missed = [
                await asyncio.to_thread(fake.say, ALICE, f"while away {n}", live=False)
                for n in range(3)
            ]
            await adapter.send(OutboundMessage(events[0].chat, "my own"))
            assert await adapter.connection() == "reconnecting: the websocket connected again"
            assert await adapter.connection() == "connected"  # told once: the gateway catches up
            caught = await adapter.missed([mark], 100)
            assert [e.message_id for e in caught] == missed  # oldest first, not the mark, not ours
            assert [e.message_id for e in await adapter.missed([mark], 2)] == missed[:2]
            gone = ChatMark(ChatRef("nowhere", ChatType.CHANNEL), "x", 0)
            ids = [e.message_id for e in await adapter.missed([gone, mark], 10)]
            assert ids == missed  # the channel it cannot read is skipped

    run(body)


def test_files_are_downloaded_with_the_token_and_stopped_past_the_limit(
    fake: FakeMattermost,
) -> None:
    async def body() -> None:
        async with running(fake) as (adapter, events, _):
            data = b"\x89PNG" + b"x" * 5000
            await asyncio.to_thread(fake.say, ALICE, "look", files=[("cat.png", "image/png", data)])
            await arrived(events, 1)
            (photo,) = events[0].attachments
            assert (photo.kind, photo.name, photo.mime, photo.size) == (
                "photo",
                "cat.png",
                "image/png",
                len(data),
            )
            assert await adapter.download(photo, 10_000) == data
            with pytest.raises(DownloadError, match="up to"):
                await adapter.download(photo, 1_000)
            unsized = Attachment("document", "x", "text/plain", None, photo.ref)
            with pytest.raises(DownloadError, match="up to"):
                await adapter.download(unsized, 1_000)
            with pytest.raises(DownloadError, match="404"):
                await adapter.download(Attachment("document", ref="nope"), 1_000)

    run(body)


def test_a_wrong_token_fails_the_start_and_whoami_says_who_the_bot_is(fake: FakeMattermost) -> None:
    async def body() -> None:
        wrong = MattermostAdapter(fake.url, "not-the-token")

        async def sink(_event: MessageEvent) -> None: ...

        with pytest.raises(Exception, match=r"401|expired"):
            await wrong.start(sink)
        await wrong.stop()
        assert (await MattermostAdapter(fake.url, TOKEN).whoami()).startswith(f"@hermes ({BOT})")
        adapter = MattermostAdapter(fake.url, TOKEN)
        try:
            assert await adapter.direct_chat(ALICE) == ChatRef(f"dm-{ALICE}", ChatType.DM)
        finally:
            await adapter.stop()
        assert ("POST", "/api/v4/channels/direct", [BOT, ALICE]) in fake.calls

    run(body)


def test_a_first_message_in_a_channel_never_read_is_caught_up_from_the_last_day(
    fake: FakeMattermost,
) -> None:
    """No mark: the bot's channels (by team) whose last post is recent are read from a
    day back; a channel with a mark is read from its mark only."""
    old = int(time.time() * 1000) - 2 * 24 * 3_600_000
    fake.say(BOB, "too old to answer", live=False, at=old)
    fake.say(BOB, "hello, first time", live=False)

    async def body() -> None:
        async with running(fake) as (adapter, _events, _):
            caught = await adapter.missed([], 10)
            assert [(e.text, e.chat.type) for e in caught] == [("hello, first time", ChatType.DM)]
            marked = ChatMark(caught[0].chat, caught[0].message_id, caught[0].order)
            assert await adapter.missed([marked], 10) == []  # marked: nothing twice

    run(body)
