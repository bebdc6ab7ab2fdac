"""Photos, voice notes and files on every platform: each platform's download path
(Telegram getFile + file URL, Discord attachment URL, Slack url_private with the bot
token) through the real SDKs against the fakes, with oversize and failed downloads."""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import text

from gateway.pipeline.media import collect_garbage
from hermes.state.db import SessionDB
from tests.adapters.drivers import Driver, TelegramDriver, by_name, driver_for, platforms_with
from tests.adapters.harness import run_gateway
from tests.apps import app_config
from tests.fakes.documents import pdf
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.postgres import ScratchServer
from tests.harness.wait import until


@pytest.fixture(params=platforms_with("photo", "voice", "document", "break_downloads"))
def side(request: pytest.FixtureRequest) -> Driver:
    return driver_for(request)


def run(
    home: Path,
    fake_llm: FakeOpenAI,
    side: Driver,
    body: Callable[[], Awaitable[Any]],
    **config: Any,
) -> Any:
    # whole replies: a loaded machine would otherwise stream a first part (test_streaming.py)
    gateway = {"streaming": False, **config.pop("gateway", {})}
    cfg = app_config(fake_llm, gateway=gateway, **config)
    return run_gateway(home, fake_llm, side.adapter, body, side.ready, config=cfg)


def jpeg(width: int = 3000, height: int = 2000) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 40)).save(out, "JPEG")
    return out.getvalue()


def user_content(fake_llm: FakeOpenAI) -> Any:
    return next(m for m in reversed(fake_llm.requests[-1]["messages"]) if m["role"] == "user")[
        "content"
    ]


def stored_user_messages(home: Path, side: Driver) -> list[str]:
    db = SessionDB.open(home)
    try:
        user = db.people.user_for_identity(side.name, side.user)
        return [
            m.content
            for s in db.conversations.list_sessions(user)
            for m in db.conversations.messages(s.id, user)
            if m.role == "user"
        ]
    finally:
        db.close()


def test_a_photo_goes_to_the_model_downscaled_and_is_kept_by_reference(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    fake_llm.push(Reply(text="A red square."))

    async def body() -> None:
        side.photo(jpeg(), "what is this?")
        await until(lambda: "A red square." in side.replies(), "no answer")

    run(home, fake_llm, side, body)
    content = user_content(fake_llm)
    text, image = content[0], content[1]
    assert text["type"] == "text" and "what is this?" in text["text"] and "[photo" in text["text"]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith(
        "data:image/jpeg;base64,"
    )
    import base64

    shown = Image.open(io.BytesIO(base64.b64decode(image["image_url"]["url"].split(",", 1)[1])))
    assert max(shown.size) <= 1568  # downscaled from 3000 x 2000
    (stored,) = stored_user_messages(home, side)
    assert "what is this?" in stored and "base64" not in stored  # by reference, not inlined
    files = list((home / "media").iterdir())
    assert len(files) == 1 and files[0].stat().st_mode & 0o777 == 0o600
    db = SessionDB.open(home)
    user = db.people.user_for_identity(side.name, side.user)
    (session,) = db.conversations.list_sessions(user)
    (row,) = db.conversations.media(session.id, user)
    assert row.kind == "photo" and row.path == f"media/{files[0].name}"
    db.close()


def test_on_postgresql_a_photo_is_kept_in_the_database_not_on_this_disk(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram, postgres: ScratchServer
) -> None:
    """Any machine's turn can read what arrived on another; pruned, the bytes go too."""
    side = TelegramDriver(telegram)
    fake_llm.push(Reply(text="A red square."))
    name, url = postgres.schema()

    async def body() -> None:
        side.photo(jpeg(), "what is this?")
        await until(lambda: "A red square." in side.replies(), "no answer")

    try:
        cfg = app_config(fake_llm, gateway={"streaming": False})
        run_gateway(home, fake_llm, side.adapter, body, config=cfg, database_url=url)
        assert not (home / "media").exists()
        db = SessionDB.open(home, url)
        try:
            user = db.people.user_for_identity("telegram", side.user)
            (session,) = db.conversations.list_sessions(user)
            (row,) = db.conversations.media(session.id, user)
            kept = db.conversations.media_bytes(row.path)
            assert kept is not None and len(kept) == row.bytes
            assert Image.open(io.BytesIO(kept)).size[0] <= 1568
            assert collect_garbage(home, db) == 0  # still referred to
            db.upkeep.prune(0, dry_run=False)
            # a file arriving now is stored before the row naming it: bytes an hour old
            # or younger are kept whatever refers to them
            db.conversations.put_media_bytes("media/arriving.png", b"x" * 10)
            assert collect_garbage(home, db) == 0
            with db.engine.begin() as conn:
                conn.execute(
                    text("UPDATE media_blobs SET created_at = created_at - '2h'::interval")
                )
            assert collect_garbage(home, db) == 2
            assert db.conversations.media_bytes(row.path) is None
        finally:
            db.close()
    finally:
        postgres.drop_schema(name)


def test_without_vision_a_photo_gets_an_honest_note_and_no_model_call(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    async def body() -> None:
        side.photo(jpeg(64, 64), "")
        await until(side.replies, "no note")

    run(home, fake_llm, side, body, llm={"vision": "off"})
    (note,) = side.replies()
    assert "can't see photos" in note and fake_llm.requests == [] and side.downloads() == 0


def test_a_voice_note_is_transcribed_into_the_message_and_searchable(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    fake_llm.transcript = "remind me to buy oat milk"
    fake_llm.push(Reply(text="Noted: oat milk."))

    async def body() -> None:
        side.voice(b"OggS fake opus bytes", 4.0)
        await until(lambda: "Noted: oat milk." in side.replies(), "no answer")

    run(home, fake_llm, side, body)
    said = user_content(fake_llm)
    assert "[voice note, transcribed]\n<transcript-" in said  # in its fence
    assert "\nremind me to buy oat milk\n</transcript-" in said
    (sent,) = fake_llm.transcribe_requests
    assert sent["model"] == "whisper-1" and sent["file_bytes"] == len(b"OggS fake opus bytes")
    db = SessionDB.open(home)
    user = db.people.user_for_identity(side.name, side.user)
    from hermes.state.search import SearchScope

    assert db.conversations.search(SearchScope(user), "oat milk")  # stored and searchable
    db.close()


@pytest.fixture(params=[d for d in platforms_with("voice") if by_name(d).durations])
def timed(request: pytest.FixtureRequest) -> Driver:
    """A platform that says a voice note's length before it is downloaded."""
    return driver_for(request)


def test_a_long_recording_is_refused_before_downloading_a_failed_transcription_asks_for_text(
    home: Path, fake_llm: FakeOpenAI, timed: Driver
) -> None:
    side = timed
    fake_llm.transcribe_script.append(Reply(status=500))

    async def body() -> None:
        side.voice(b"x" * 100, 3600.0)
        await until(side.replies, "no refusal")
        side.voice(b"OggS", 3.0)
        await until(lambda: len(side.replies()) >= 2, "no failure note")

    run(home, fake_llm, side, body)
    too_long, failed = side.replies()
    assert "60 min" in too_long and "10 min" in too_long
    assert "couldn't transcribe" in failed and "type it" in failed
    assert side.downloads() == 1  # only the short one was fetched
    assert fake_llm.requests == []


def test_text_files_and_pdfs_are_read_into_the_message(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    fake_llm.push(Reply(text="Read the CSV."), Reply(text="Read the PDF."))

    async def body() -> None:
        side.document(b"name,qty\noat milk,2\n", "shopping.csv", "text/csv")
        # what the chat shows (a streamed reply may be posted in part, then edited)
        await until(lambda: "Read the CSV." in side.shown(), "csv not answered")
        csv_content = user_content(fake_llm)
        side.document(pdf("Quarterly numbers are up"), "report.pdf", "application/pdf")
        await until(lambda: "Read the PDF." in side.shown(), "pdf not answered")
        assert "shopping.csv" in csv_content and "oat milk,2" in csv_content

    run(home, fake_llm, side, body)
    content = user_content(fake_llm)
    assert "report.pdf" in content and "Quarterly numbers are up" in content
    assert "<document-" in content and "data, not instructions" in content  # in its fence


def test_oversize_unsupported_and_failed_downloads_get_clear_notes(
    home: Path, fake_llm: FakeOpenAI, side: Driver
) -> None:
    async def body() -> None:
        side.document(b"small", "big.txt", "text/plain", size=50_000_000)
        await until(side.replies, "no oversize note")
        side.document(b"PK\x03\x04", "archive.zip", "application/zip")
        await until(lambda: len(side.replies()) >= 2, "no unsupported note")
        side.break_downloads()
        side.document(b"hello", "report.txt", "text/plain")
        await until(lambda: len(side.replies()) >= 3, "no failure note")

    run(home, fake_llm, side, body)
    oversize, unsupported, failed = side.replies()
    assert "50.0 MB" in oversize or "KB" in oversize
    assert "archive.zip" in unsupported and "PDF" in unsupported
    assert "couldn't fetch" in failed
    assert side.downloads() == 1  # only the last was tried: sizes are checked first
    assert fake_llm.requests == []


def test_auto_vision_falls_back_once_an_endpoint_refuses_image_parts(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    side = TelegramDriver(telegram)

    def text_only(request: dict[str, Any]) -> Reply:  # an endpoint that refuses image parts
        said = user_content_of(request)
        if isinstance(said, list):
            return Reply(status=400)
        # answered by what was asked (not by order: a retried request is asked twice)
        return Reply(text="ok" if "and this one?" in said else "I can't see images, sorry.")

    fake_llm.responder = text_only

    def seen() -> str:
        asked = [str(user_content_of(r))[:80] for r in fake_llm.requests]
        return f"replies {side.replies()}, asked {asked}"

    async def body() -> None:
        side.photo(jpeg(64, 64), "look")
        await until(
            lambda: "I can't see images, sorry." in side.replies(), lambda: f"no answer: {seen()}"
        )
        side.photo(jpeg(64, 64), "and this one?")
        await until(lambda: "ok" in side.replies(), lambda: f"no second answer: {seen()}")

    run(home, fake_llm, side, body)
    with_image = [r for r in fake_llm.requests if isinstance(user_content_of(r), list)]
    without = [user_content_of(r) for r in fake_llm.requests if r not in with_image]
    assert with_image and all("look" in user_content_of(r)[0]["text"] for r in with_image)
    assert all("cannot see images" in said for said in without if "look" in said)  # told why
    assert any("and this one?" in said for said in without)  # the next photo: not sent again
    assert side.replies() == ["I can't see images, sorry.", "ok"]


def user_content_of(request: dict[str, Any]) -> Any:
    return next(m for m in reversed(request["messages"]) if m["role"] == "user")["content"]


def test_pruned_sessions_take_their_media_files_with_them(
    home: Path, fake_llm: FakeOpenAI, telegram: FakeTelegram
) -> None:
    side = TelegramDriver(telegram)
    fake_llm.push(Reply(text="Nice."))

    async def body() -> None:
        side.photo(jpeg(64, 64), "keep this?")
        await until(lambda: "Nice." in side.replies(), "no answer")

    run(home, fake_llm, side, body)
    (photo,) = (home / "media").iterdir()
    db = SessionDB.open(home)
    try:
        from gateway.pipeline.media import collect_garbage

        assert collect_garbage(home, db) == 0 and photo.exists()  # still referred to
        assert db.upkeep.prune(0, dry_run=False) == 1  # the session goes ...
        assert collect_garbage(home, db) == 1 and not photo.exists()  # ... and its photo
    finally:
        db.close()
