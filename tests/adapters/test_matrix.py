"""The Matrix adapter (matrix-nio) against a local homeserver (the client-server API)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from nio import AsyncClient, AsyncClientConfig, RoomSendResponse, SyncResponse
from nio.crypto.attachments import decrypt_attachment, encrypt_attachment
from nio.events.room_events import RoomEncryptedFile

from adapters.matrix import MatrixConfig
from adapters.matrix.adapter import KEYS, MatrixAdapter, MatrixError, mentioned, to_event
from gateway.edge.events import (
    Attachment,
    Button,
    ChatRef,
    ChatType,
    MessageEvent,
    OutboundFile,
    OutboundMessage,
)
from gateway.edge.ports import CatchesUp, ChatMark, DownloadError
from tests.fakes.matrix_server import BOT, BUTTONS, TOKEN, FakeMatrix, Fault, user
from tests.harness.wait import until, until_count

ALICE, BOB, EVE = user("alice"), user("bob"), user("eve")


@asynccontextmanager
async def running(
    fake: FakeMatrix, *, allowed: Sequence[str] = (ALICE,), invites: Any = "allowed"
) -> AsyncIterator[tuple[MatrixAdapter, list[MessageEvent]]]:
    adapter = MatrixAdapter(fake.url, BOT, TOKEN, allowed_users=allowed, invites=invites)
    events: list[MessageEvent] = []

    async def sink(event: MessageEvent) -> None:
        events.append(event)

    await adapter.start(sink)
    try:
        yield adapter, events
    finally:
        await adapter.stop()


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


async def arrived(events: list[MessageEvent], n: int) -> None:
    await until_count(lambda: events, n, "events", timeout=10)


async def said(fake: FakeMatrix, person: str, text: str, **kwargs: Any) -> str:
    return await asyncio.to_thread(fake.say, person, text, **kwargs)


def test_a_dm_and_a_mention_in_a_room_become_events_and_replies_go_where_they_belong(
    matrix: FakeMatrix,
) -> None:
    room = matrix.room("!team:hermes.test", ALICE, BOB)

    async def body() -> None:
        async with running(matrix) as (adapter, events):
            await said(matrix, ALICE, "hello")
            await said(matrix, BOB, "just chatting", room=room)  # not for the bot
            await said(matrix, BOB, "Hermes: what time is it?", room=room)
            root = await said(matrix, ALICE, "start", room=room, mentions=[BOT])
            await said(matrix, ALICE, "and in the thread", room=room, thread=root, mentions=[BOT])
            await arrived(events, 5)
            by_text = {e.text: e for e in events}  # one sync's rooms come in any order
            dm, chatting, named, intentional, threaded = (
                by_text[t]
                for t in (
                    "hello",
                    "just chatting",
                    "what time is it?",
                    "start",
                    "and in the thread",
                )
            )
            assert dm.chat == ChatRef(matrix.dm(ALICE), ChatType.DM) and dm.text == "hello"
            assert not chatting.mentioned and chatting.chat.type is ChatType.GROUP
            assert named.mentioned and named.text == "what time is it?"
            assert intentional.mentioned and intentional.text == "start"
            assert threaded.chat.thread_id == root and threaded.text == "and in the thread"
            assert dm.sent_at is not None and dm.order > 0
            # replies: in the thread, as a reply in a room, plainly in a DM
            await adapter.send(
                OutboundMessage(threaded.chat, "in thread", reply_to_id=threaded.message_id)
            )
            await adapter.send(
                OutboundMessage(named.chat, "**bold**", reply_to_id=named.message_id)
            )
            await adapter.send(OutboundMessage(dm.chat, "hi", reply_to_id=dm.message_id))
            thread, reply, plain = (e["content"] for e in matrix.sent()[-3:])
            assert thread["m.relates_to"]["rel_type"] == "m.thread"
            assert thread["m.relates_to"]["event_id"] == root
            assert reply["m.relates_to"] == {"m.in_reply_to": {"event_id": named.message_id}}
            assert reply["formatted_body"] == "<p><strong>bold</strong></p>"
            assert reply["body"] == "**bold**" and reply["m.mentions"] == {}
            assert "m.relates_to" not in plain
            assert len(events) == 5  # the bot's own messages are no events

    run(body)


def test_to_event_leaves_out_edits_notices_and_redactions_and_reads_files() -> None:
    base = {"event_id": "$e", "sender": ALICE, "origin_server_ts": 1_700_000_000_000}

    def event(content: dict[str, Any], **more: Any) -> MessageEvent | None:
        raw = {**base, "type": "m.room.message", "content": content, **more}
        return to_event(raw, "!r:x", ChatType.DM, BOT, "Hermes Assistant")

    assert event({"msgtype": "m.notice", "body": "a bot"}) is None
    edit = {"rel_type": "m.replace", "event_id": "$x"}
    assert event({"msgtype": "m.text", "body": "* fixed", "m.relates_to": edit}) is None
    assert event({"msgtype": "m.text", "body": "x"}, unsigned={"redacted_because": {}}) is None
    own = {**base, "sender": BOT, "type": "m.room.message", "content": {"msgtype": "m.text"}}
    assert to_event(own, "!r:x", ChatType.DM, BOT) is None
    reply = event(
        {
            "msgtype": "m.text",
            "body": "> <@bob:hermes.test> earlier\n\nmy answer",
            "m.relates_to": {"m.in_reply_to": {"event_id": "$earlier"}},
        }
    )
    assert reply is not None and reply.text == "my answer" and reply.reply_to_id == "$earlier"
    voice = event(
        {
            "msgtype": "m.audio",
            "body": "Voice message",
            "url": "mxc://hermes.test/abc",
            "info": {"mimetype": "audio/ogg", "size": 1234, "duration": 4200},
            "org.matrix.msc3245.voice": {},
        }
    )
    assert voice is not None and voice.text == ""
    assert voice.attachments == (
        Attachment("voice", "Voice message", "audio/ogg", 1234, "mxc://hermes.test/abc", 4.2),
    )
    captioned = event(
        {"msgtype": "m.image", "body": "look at this", "filename": "cat.png",
         "url": "mxc://hermes.test/c", "info": {"mimetype": "image/png"}}
    )  # fmt: skip
    assert captioned is not None and captioned.text == "look at this"
    assert captioned.attachments[0].kind == "photo"
    encrypted_file = event({"msgtype": "m.file", "body": "x.pdf", "file": {"url": "mxc://a/b"}})
    assert encrypted_file is not None  # an encrypted room's file: the key travels with it
    assert encrypted_file.attachments[0].ref.startswith('encrypted:{"url": "mxc://a/b"')


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"body": "hermes, are you there?"}, (True, "are you there?")),
        ({"body": "@hermes:hermes.test summarise this"}, (True, "summarise this")),
        ({"body": "Hermes: hi", "m.mentions": {"user_ids": [BOT]}}, (True, "hi")),
        ({"body": "ask Hermes later", "m.mentions": {}}, (False, "ask Hermes later")),
        ({"body": "hermesian thoughts"}, (False, "hermesian thoughts")),
        ({"body": "Hermes Assistant, hello"}, (True, "hello")),  # the display name
        (
            {
                "body": "Hermes hi",
                "formatted_body": f'<a href="https://matrix.to/#/{BOT}">Hermes</a> hi',
            },
            (True, "hi"),
        ),
    ],
)
def test_a_mention_is_the_bots_id_name_or_link_and_is_taken_out(
    content: dict[str, Any], expected: tuple[bool, str]
) -> None:
    assert mentioned(content, BOT, "Hermes Assistant") == expected


def test_invitations_are_taken_only_from_people_allowed_in(matrix: FakeMatrix) -> None:
    async def body() -> None:
        async with running(matrix, allowed=(ALICE,)) as (_adapter, events):
            from_alice = await asyncio.to_thread(matrix.invite, ALICE)
            from_eve = await asyncio.to_thread(matrix.invite, EVE)
            await until(lambda: matrix.rooms[from_alice].members[BOT] == "join", "not joined")
            await until(lambda: matrix.rooms[from_eve].members[BOT] == "leave", "not declined")
            await said(matrix, ALICE, "thanks for joining", room=from_alice)
            await arrived(events, 1)
            assert events[0].chat.type is ChatType.DM  # opened as a direct chat
        async with running(matrix, allowed=(), invites="direct") as (_adapter, _events):
            direct = await asyncio.to_thread(matrix.invite, EVE)
            group = await asyncio.to_thread(matrix.invite, EVE, direct=False)
            await until(lambda: matrix.rooms[direct].members[BOT] == "join", "eve's DM: not joined")
            await until(lambda: matrix.rooms[group].members[BOT] == "leave", "not declined")

    run(body)


def test_a_reaction_or_a_numbered_reply_presses_a_button_on_any_instance(
    matrix: FakeMatrix,
) -> None:
    dm = matrix.dm(ALICE)
    buttons = (Button("Approve", "/admin approve X1"), Button("Deny", "/admin deny X1"))

    async def body() -> None:
        async with running(matrix) as (adapter, events):
            sent = await adapter.send(
                OutboundMessage(ChatRef(dm, ChatType.DM), "May I?", buttons=buttons)
            )
            message = sent.message_ids[0]
            shown = matrix.event(message)["content"]
            assert shown["body"].startswith("May I?\n\n1️⃣ Approve  2️⃣ Deny")
            assert [b["command"] for b in shown[BUTTONS]] == ["/admin approve X1", "/admin deny X1"]
            keys = [
                e["content"]["m.relates_to"]["key"]
                for e in matrix.stream
                if e["type"] == "m.reaction"
            ]
            assert keys == list(KEYS[:2])  # the keys to tap are under it
            await asyncio.to_thread(matrix.react, ALICE, dm, message, KEYS[1])
            await asyncio.to_thread(matrix.react, ALICE, dm, message, "👍")  # no button
            await arrived(events, 1)
        async with running(matrix) as (_adapter, events):  # a restart: read from the server
            await said(matrix, ALICE, "1", reply_to=message)
            room = await asyncio.to_thread(matrix.room, "!r:hermes.test", ALICE, BOB)
            other = await said(matrix, BOB, "not the bot's", room=room)
            forged = [{"key": KEYS[0], "command": "/admin approve Y"}]
            matrix.event(other)["content"][BUTTONS] = forged  # buttons on Bob's message
            await asyncio.to_thread(matrix.react, ALICE, room, other, KEYS[0])
            await said(matrix, ALICE, "after")
            await arrived(events, 3)
        return_events.extend(e for e in events if e.pressed or e.text == "after")

    return_events: list[MessageEvent] = []
    run(body)
    pressed, after = return_events
    assert pressed.pressed and pressed.text == "/admin approve X1" and pressed.user.id == ALICE
    assert after.text == "after"  # a forged button on someone else's message is nothing


def test_removing_the_buttons_takes_their_keys_away_and_an_edit_keeps_them_otherwise(
    matrix: FakeMatrix,
) -> None:
    chat = ChatRef(matrix.dm(ALICE), ChatType.DM)

    async def body() -> None:
        async with running(matrix) as (adapter, _events):
            buttons = (Button("Approve", "/admin approve Z"),)
            message = (
                await adapter.send(OutboundMessage(chat, "May I?", buttons=buttons))
            ).message_ids[0]
            await adapter.edit(chat, message, OutboundMessage(chat, "May I? (asked twice)"))
            assert matrix.shown()[-1]["content"][BUTTONS][0]["command"] == "/admin approve Z"
            await adapter.edit(chat, message, OutboundMessage(chat, "Approved by Ann", buttons=()))
            assert matrix.text_of(message) == "Approved by Ann"
            assert BUTTONS not in matrix.shown()[-1]["content"]
            reactions = [e for e in matrix.stream if e["type"] == "m.reaction"]
            assert reactions and all(e.get("redacted") for e in reactions)
            assert (await adapter.delete(chat, message)).ok and matrix.text_of(message) == ""

    run(body)


def test_what_was_written_while_no_gateway_synced_is_caught_up_from_the_marks(
    matrix: FakeMatrix,
) -> None:
    dm = matrix.dm(ALICE)
    quiet = matrix.dm(BOB)

    async def body() -> None:
        async with running(matrix) as (adapter, events):
            assert isinstance(adapter, CatchesUp)
            await said(matrix, ALICE, "read before")
            await arrived(events, 1)
            mark = ChatMark(events[0].chat, events[0].message_id, events[0].order)
        for n in range(130):  # more than a page of history
            matrix.say(ALICE, f"while down {n}")
        matrix.say(BOB, "first words, never read")  # a room without a mark
        async with running(matrix) as (adapter, events):
            caught = await adapter.missed([mark], 200)
            mine = [e.text for e in caught if e.chat.id == dm]
            assert mine == [f"while down {n}" for n in range(130)]  # in order, once
            assert [e.text for e in caught if e.chat.id == quiet] == ["first words, never read"]
            again = await adapter.missed([mark], 5)  # later catch-ups: the marks only
            assert [e.text for e in again] == [f"while down {n}" for n in range(5)]
            gone = ChatMark(ChatRef("!gone:hermes.test", ChatType.DM), "$nope", 1)
            assert await adapter.missed([gone], 5) == []  # a room it cannot read: skipped
            assert events == []  # nothing old came live

    run(body)


def test_a_homeserver_that_goes_away_is_synced_again_and_refusals_are_mapped(
    matrix: FakeMatrix,
) -> None:
    chat = ChatRef(matrix.dm(ALICE), ChatType.DM)

    async def body() -> None:
        async with running(matrix) as (adapter, events):
            before = matrix.syncs
            matrix.drop()
            await until(lambda: adapter._state.startswith("reconnecting"), "never noticed")
            assert (await adapter.connection()).startswith("reconnecting")
            await until(lambda: matrix.syncs > before, "never synced again", timeout=20)
            await said(matrix, ALICE, "back?")
            await arrived(events, 1)
            assert await adapter.connection() == "connected"
            matrix.faults.append(Fault("/send/", 429, 2500))
            limited = await adapter.send(OutboundMessage(chat, "x"))
            assert limited.retryable and limited.retry_after == 2.5
            matrix.faults.append(Fault("/send/", 502, None))
            assert (await adapter.send(OutboundMessage(chat, "x"))).retryable
            gone = await adapter.send(
                OutboundMessage(ChatRef("!nope:hermes.test", ChatType.DM), "x")
            )
            assert not gone.ok and not gone.retryable and "M_FORBIDDEN" in (gone.error or "")

    run(body)


def test_a_wrong_token_or_account_is_refused_with_the_reason(matrix: FakeMatrix) -> None:
    async def body() -> None:
        assert "@hermes:hermes.test" in await MatrixAdapter(matrix.url, BOT, TOKEN).whoami()
        with pytest.raises(MatrixError, match="M_UNKNOWN_TOKEN"):
            await MatrixAdapter(matrix.url, BOT, "syt_wrong").whoami()
        with pytest.raises(MatrixError, match=r"not @other:hermes\.test"):
            await MatrixAdapter(matrix.url, "@other:hermes.test", TOKEN).whoami()

    run(body)
    with pytest.raises(ValueError, match="user_id"):
        from adapters.matrix import PLATFORM

        PLATFORM.build(
            MatrixConfig(homeserver=matrix.url, user_id="hermes"), {"token_env": TOKEN}, [], False
        )


def test_files_are_read_from_the_content_repository_within_the_limit(
    matrix: FakeMatrix,
) -> None:
    async def body() -> None:
        async with running(matrix) as (adapter, events):
            await said(matrix, ALICE, "", file=("a.pdf", "application/pdf", b"%PDF-1.4 small"))
            await said(
                matrix, ALICE, "", file=("big.bin", "application/octet-stream", b"x" * 5000, 10)
            )
            await said(matrix, ALICE, "", file=("huge.bin", "application/octet-stream", b"", 10**9))
            await arrived(events, 3)
            small, lying, huge = (e.attachments[0] for e in events)
            assert await adapter.download(small, 1000) == b"%PDF-1.4 small"
            with pytest.raises(DownloadError, match="MB"):
                await adapter.download(lying, 1000)  # said 10 bytes: stopped past the limit
            reads = matrix.downloads
            with pytest.raises(DownloadError, match="MB"):
                await adapter.download(huge, 1000)
            assert matrix.downloads == reads  # refused before reading
            matrix.broken_downloads = True
            with pytest.raises(DownloadError, match="HTTP 500"):
                await adapter.download(small, 1000)

    run(body)


def test_files_sent_keep_to_the_homeservers_upload_limit(matrix: FakeMatrix) -> None:
    """The limit is the server's `m.upload.size` (asked at start); an upload the server
    refuses anyway (M_TOO_LARGE) is a failure not to retry, and nothing is posted."""
    matrix.max_upload = 4000
    room = matrix.dm(ALICE)

    async def body() -> None:
        async with running(matrix) as (adapter, _events):
            assert adapter.capabilities.max_file_bytes == 4000
            chat = ChatRef(room, ChatType.DM)
            sent = await adapter.send_file(OutboundFile(chat, "a.txt", "text/plain", b"hi"))
            assert sent.ok, sent.error
            matrix.max_upload = 10  # lowered since
            refused = await adapter.send_file(OutboundFile(chat, "b.txt", "text/plain", b"x" * 50))
            assert not refused.ok and not refused.retryable and "M_TOO_LARGE" in str(refused.error)
            assert [c["filename"] for c in matrix.sent_files(room)] == ["a.txt"]

    run(body)


def test_an_encrypted_room_is_told_once_that_it_cannot_be_read(matrix: FakeMatrix) -> None:
    dm = matrix.dm(ALICE)

    async def body() -> None:
        async with running(matrix) as (_adapter, events):
            for _ in range(2):
                await asyncio.to_thread(matrix.say_encrypted, ALICE, dm)
            await said(matrix, ALICE, "plain")
            await arrived(events, 1)
            notices = [e for e in matrix.sent(dm) if e["content"].get("msgtype") == "m.notice"]
            assert len(notices) == 1 and "encrypted" in notices[0]["content"]["body"]

    run(body)


def test_a_sync_that_skipped_events_has_the_gateway_catch_up(matrix: FakeMatrix) -> None:
    async def body() -> None:
        async with running(matrix) as (adapter, events):
            matrix.paused = True  # the next sync is answered once all these are written
            for n in range(60):  # more than a sync's timeline holds
                await said(matrix, ALICE, f"m{n}")
            matrix.paused = False
            await arrived(events, 50)
            await until(lambda: adapter._unseen_gap, "the gap went unnoticed")
            assert (await adapter.connection()).startswith("reconnecting")  # said once
            assert await adapter.connection() == "connected"

    run(body)


def test_an_encrypted_dm_is_read_and_answered_encrypted(matrix: FakeMatrix, tmp_path: Path) -> None:
    """With encryption on, the bot is a device with its own keys: a person's client
    (matrix-nio with its crypto, as Element would) shares its room key with it, the bot
    reads the message and its reply goes out encrypted; the person's client decrypts it.
    A file the bot sends is uploaded encrypted (the repository holds ciphertext) and its
    keys travel in the encrypted event: the person's client decrypts both. A restarted
    bot is the same device (its keys kept in the store)."""
    dm = matrix.dm(ALICE)
    matrix.encrypt(dm)

    async def body() -> None:
        person = AsyncClient(
            matrix.url,
            ALICE,
            store_path=str(tmp_path / "alice"),
            config=AsyncClientConfig(encryption_enabled=True, store_sync_tokens=False),
        )
        (tmp_path / "alice").mkdir()
        person.restore_login(ALICE, "ALICEPHONE", matrix.client(ALICE, "ALICEPHONE"))
        try:
            await person.keys_upload()
            adapter = MatrixAdapter(matrix.url, BOT, TOKEN, store=tmp_path / "bot")
            events: list[MessageEvent] = []

            async def sink(event: MessageEvent) -> None:
                events.append(event)

            await adapter.start(sink)
            try:
                await person.sync(timeout=0)
                content = {"msgtype": "m.text", "body": "a secret hello"}
                sent = await person.room_send(
                    dm, "m.room.message", content, ignore_unverified_devices=True
                )
                assert isinstance(sent, RoomSendResponse), sent
                assert matrix.event(sent.event_id)["type"] == "m.room.encrypted"
                await arrived(events, 1)
                assert events[0].text == "a secret hello" and events[0].chat.type is ChatType.DM
                reply = await adapter.send(OutboundMessage(events[0].chat, "a secret answer"))
                assert reply.ok, reply.error
                assert matrix.event(reply.message_ids[0])["type"] == "m.room.encrypted"
                plan = b"day,plan\nmon,secret\n"
                file = OutboundFile(events[0].chat, "plan.csv", "text/csv", plan, "the plan")
                upload = await adapter.send_file(file)
                assert upload.ok, upload.error
                assert matrix.event(upload.message_ids[0])["type"] == "m.room.encrypted"
                assert plan not in [data for data, _ in matrix.media.values()]  # ciphertext
                shown: list[Any] = []
                for _ in range(20):
                    synced = await person.sync(timeout=0)
                    if isinstance(synced, SyncResponse) and dm in synced.rooms.join:
                        shown += synced.rooms.join[dm].timeline.events
                    if any(isinstance(e, RoomEncryptedFile) for e in shown):
                        break
                    await asyncio.sleep(0.1)
                assert "a secret answer" in [str(getattr(e, "body", "")) for e in shown]
                [sealed] = [e for e in shown if isinstance(e, RoomEncryptedFile)]
                assert sealed.body == "the plan" and sealed.source["content"]["filename"] == (
                    "plan.csv"
                )
                ciphertext, _ = matrix.media[sealed.url.rsplit("/", 1)[-1]]
                opened = decrypt_attachment(
                    ciphertext, sealed.key["k"], sealed.hashes["sha256"], sealed.iv
                )
                assert opened == plan
            finally:
                await adapter.stop()
            # nio commits its keys on the event loop: without waiting for the disk
            (keys,) = (tmp_path / "bot").glob("*.db")
            with sqlite3.connect(keys) as conn:
                assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            device = matrix.device_keys[BOT]
            again = MatrixAdapter(matrix.url, BOT, TOKEN, store=tmp_path / "bot")
            await again.start(sink)
            await again.stop()
            assert matrix.device_keys[BOT] == device  # the same device, the same keys
        finally:
            await person.close()

    run(body)


def test_encryption_needs_a_folder_for_the_keys(matrix: FakeMatrix, tmp_path: Path) -> None:
    from adapters.matrix import PLATFORM

    values = {"token_env": TOKEN}
    config = MatrixConfig(homeserver=matrix.url, user_id=BOT, encryption=True)
    with pytest.raises(ValueError, match="store"):
        PLATFORM.build(config, values, [], False)
    keys = tmp_path / "keys"
    built = PLATFORM.build(config.model_copy(update={"store": str(keys)}), values, [], False)
    assert isinstance(built, MatrixAdapter)

    async def body() -> None:
        await built.start(lambda _event: asyncio.sleep(0))
        await built.stop()

    run(body)
    assert keys.stat().st_mode & 0o777 == 0o700 and any(keys.iterdir())  # the device's keys


def test_a_file_in_an_encrypted_room_is_fetched_and_decrypted(matrix: FakeMatrix) -> None:
    """An encrypted room's file: the repository holds ciphertext; the message's `file`
    carries the key, the IV and the hash, and a wrong hash is refused."""
    ciphertext, keys = encrypt_attachment(b"%PDF-1.4 the secret report")
    matrix.media["sealed"] = (ciphertext, "application/octet-stream")
    file = {"url": "mxc://hermes.test/sealed", "v": "v2", **keys}
    raw = {
        "type": "m.room.message",
        "event_id": "$f",
        "sender": ALICE,
        "origin_server_ts": 1,
        "content": {"msgtype": "m.file", "body": "report.pdf", "file": file,
                    "info": {"mimetype": "application/pdf", "size": len(ciphertext)}},
    }  # fmt: skip
    event = to_event(raw, "!r:hermes.test", ChatType.DM, BOT)
    assert event is not None
    (attachment,) = event.attachments
    forged = {**file, "hashes": {"sha256": "AAAA"}}
    raw["content"]["file"] = forged
    tampered = to_event(raw, "!r:hermes.test", ChatType.DM, BOT)
    assert tampered is not None

    async def body() -> None:
        async with running(matrix) as (adapter, _events):
            assert await adapter.download(attachment, 10_000) == b"%PDF-1.4 the secret report"
            with pytest.raises(DownloadError, match="decrypted"):
                await adapter.download(tampered.attachments[0], 10_000)

    run(body)


def test_an_event_whose_handling_fails_on_the_way_does_not_stop_the_sync(
    matrix: FakeMatrix,
) -> None:
    async def body() -> None:
        async with running(matrix) as (adapter, events):
            matrix.faults.append(Fault("/join/", 0, None))  # the join's connection drops
            invited = await asyncio.to_thread(matrix.invite, ALICE)
            await said(matrix, BOB, "still listening?")
            await arrived(events, 1)
            assert events[0].text == "still listening?"
            assert matrix.rooms[invited].members[BOT] == "invite"  # taken at the next start
            assert await adapter.connection() == "connected"

    run(body)
