"""The real openai client against the local fake server: retries, timeouts, errors."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import pytest

from hermes.llm.client import (
    CUT_NOTE,
    MAX_REPLY_CHARS,
    TRANSCRIPT_CUT_NOTE,
    LLMClient,
    LLMError,
)
from hermes.llm.endpoint import Endpoint
from hermes.llm.summarizer import LLMSummarizer
from tests.fakes.openai_server import FakeOpenAI, Reply


def client(fake: FakeOpenAI, **overrides: object) -> LLMClient:
    settings: dict[str, object] = {"timeout": 5.0, "max_retries": 2, "api_key": "sk-test-secret"}
    settings.update(overrides)
    return LLMClient(Endpoint(base_url=fake.base_url, model="fake-model", **settings))  # type: ignore[arg-type]


def ask(llm: LLMClient) -> str:
    async def go() -> str:
        try:
            return await llm.text([{"role": "user", "content": "hi"}])
        finally:
            await llm.close()

    return asyncio.run(go())


def test_text_answer_and_request_shape(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(Reply(text="hello there"))
    assert ask(client(fake_llm, temperature=0.3)) == "hello there"
    request = fake_llm.requests[0]
    assert request["model"] == "fake-model" and request["temperature"] == 0.3
    assert request["messages"] == [{"role": "user", "content": "hi"}]


def test_429_waits_retry_after_then_succeeds(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(Reply(status=429, retry_after=1), Reply(text="after the wait"))
    started = time.monotonic()
    assert ask(client(fake_llm)) == "after the wait"
    assert time.monotonic() - started >= 0.9 and len(fake_llm.requests) == 2


def test_5xx_and_dropped_connection_are_retried(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(Reply(status=500), Reply(drop_connection=True), Reply(text="third time"))
    assert ask(client(fake_llm)) == "third time"
    assert len(fake_llm.requests) == 3


def test_persistent_failure_is_a_short_safe_message(fake_llm: FakeOpenAI) -> None:
    fake_llm.default = Reply(status=503)
    with pytest.raises(LLMError) as caught:
        ask(client(fake_llm, max_retries=1))
    assert "HTTP 503" in str(caught.value) and "sk-test-secret" not in str(caught.value)


def test_timeout_message(fake_llm: FakeOpenAI) -> None:
    fake_llm.default = Reply(delay=2.0)
    with pytest.raises(LLMError, match=r"not answering \(timeout after 0.5 s\)"):
        ask(client(fake_llm, timeout=0.5, max_retries=0))


def test_unreachable_endpoint() -> None:
    llm = LLMClient(Endpoint(base_url="http://127.0.0.1:9/v1", model="m", max_retries=0))
    with pytest.raises(LLMError, match="cannot be reached"):
        ask(llm)


def test_summarizer_sends_query_and_excerpt(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(Reply(text="  They chose Postgres.  "))

    async def go() -> str:
        llm = client(fake_llm)
        try:
            return await LLMSummarizer(llm).summarize("database choice", "user: let's use postgres")
        finally:
            await llm.close()

    assert asyncio.run(go()) == "  They chose Postgres.  "
    prompt = fake_llm.requests[0]["messages"][1]["content"]
    assert "database choice" in prompt and "let's use postgres" in prompt


@pytest.mark.parametrize(
    "body",
    [b"<html>502 Bad Gateway</html>", b"\x00\xff\xfe garbage", b'{"choices": "nope"}', b"[1, 2]"],
    ids=["html", "garbage", "wrong-shape", "a-list"],
)
def test_a_body_that_is_not_a_completion_is_a_clear_model_error(
    fake_llm: FakeOpenAI, body: bytes
) -> None:
    fake_llm.default = Reply(raw_body=body)

    async def go() -> tuple[str, str]:
        llm = client(fake_llm, max_retries=0)
        errors = []
        try:
            for call in (llm.chat([{"role": "user", "content": "hi"}]), llm.text([])):
                try:
                    await call
                except LLMError as exc:
                    errors.append(str(exc))
        finally:
            await llm.close()
        return errors[0], errors[1]

    for message in asyncio.run(go()):
        assert "not a chat completion" in message and "llm.base_url" in message


def test_a_garbage_answer_keeps_the_users_message_in_the_turn(
    fake_llm: FakeOpenAI, home: Path
) -> None:
    from gateway.app import build_app
    from hermes.places import Surface
    from hermes.state.db import SessionDB
    from tests.apps import app_config

    fake_llm.default = Reply(raw_body=b"<html>oops</html>")

    async def go() -> tuple[bool, str, list[str]]:
        db = SessionDB.open(home)
        app = build_app(home, app_config(fake_llm), db)
        try:
            user = db.people.ensure_user("u_00000000000000ab").id
            conv = app.agent.sessions.open(user, Surface("cli"), "k")
            result = await app.agent.turn(conv, "are you there?", Surface("cli"))
            stored = [m.content for m in db.conversations.messages(conv.id, user)]
            return result.ok, result.text, stored
        finally:
            await app.close()
            db.close()

    ok, text, stored = asyncio.run(go())
    assert not ok and "not a chat completion" in text and "saved" in text
    assert stored == ["are you there?"]


def stream(llm: LLMClient, seen: list[str], tools: list[dict[str, object]] | None = None) -> object:
    async def go() -> object:
        try:
            return await llm.chat([{"role": "user", "content": "hi"}], tools, on_text=seen.append)
        finally:
            await llm.close()

    return asyncio.run(go())


def test_a_streamed_reply_reports_its_text_as_it_grows(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(Reply(text="one two three", pieces=["one ", "two ", "three"]))
    seen: list[str] = []
    reply = stream(client(fake_llm), seen)
    # the first piece at once, then the text so far at most every TEXT_EVERY_S, and the
    # whole text last: each a longer prefix of the next
    assert seen[0] == "one " and seen[-1] == "one two three"
    assert all(b.startswith(a) and len(b) > len(a) for a, b in itertools.pairwise(seen))
    assert reply.content == "one two three" and reply.finish_reason == "stop"  # type: ignore[attr-defined]
    assert reply.prompt_tokens == 10  # type: ignore[attr-defined]  # usage from the last chunk
    request = fake_llm.requests[0]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}


def test_a_long_streamed_reply_is_not_handed_over_once_per_chunk(fake_llm: FakeOpenAI) -> None:
    """Each hand-over carries the whole text so far: once per chunk, a long reply cost
    its length squared (1.2 M characters in 100,000 chunks: ~60 GB copied)."""
    pieces = [f"{n:05d} " for n in range(20_000)]
    fake_llm.push(Reply(text="".join(pieces), pieces=pieces))
    seen: list[str] = []
    reply = stream(client(fake_llm), seen)
    assert seen[-1] == "".join(pieces) == reply.content  # type: ignore[attr-defined]
    assert len(seen) < len(pieces) // 10


def test_a_runaway_streamed_reply_is_cut_at_the_bound_and_not_read_further(
    fake_llm: FakeOpenAI,
) -> None:
    """An endpoint gone wrong: 2,100,000 characters streamed. The reply ends at
    MAX_REPLY_CHARS with a note saying so, shown that way too, and is not asked again."""
    pieces = ["all work and no play " * 50] * 2_000  # 1,050 characters each
    fake_llm.push(Reply(text="".join(pieces), pieces=pieces), Reply(text="asked again"))
    seen: list[str] = []
    reply = stream(client(fake_llm), seen)
    content = reply.content  # type: ignore[attr-defined]
    assert content == "".join(pieces)[:MAX_REPLY_CHARS] + CUT_NOTE
    assert seen[-1] == content and reply.finish_reason == "length"  # type: ignore[attr-defined]
    assert len(fake_llm.requests) == 1


def test_a_runaway_plain_reply_is_cut_at_the_bound(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(Reply(text="na" * 1_100_000))
    assert ask(client(fake_llm)) == ("na" * 1_100_000)[:MAX_REPLY_CHARS] + CUT_NOTE


def test_a_runaway_transcript_is_cut_at_the_bound(fake_llm: FakeOpenAI) -> None:
    """A transcription endpoint gone wrong (600 s of speech is ~12,000 characters)."""
    fake_llm.transcript = "la " * 700_000

    async def go() -> str:
        llm = client(fake_llm)
        try:
            return await llm.transcribe(b"RIFF....WAVE", "note.wav", "audio/wav")
        finally:
            await llm.close()

    transcript = asyncio.run(go())
    assert transcript == ("la " * 700_000)[:MAX_REPLY_CHARS] + TRANSCRIPT_CUT_NOTE


def test_a_runaway_tool_call_is_cut_so_it_fails_as_a_call_not_as_memory(
    fake_llm: FakeOpenAI,
) -> None:
    """Arguments past the bound are cut (no longer JSON: the agent answers the model
    that the call was malformed) and the stream is not read further."""
    fake_llm.push(Reply.tool_call("memory", {"action": "add", "content": "z" * 2_100_000}))
    reply = stream(client(fake_llm), [])
    (call,) = reply.tool_calls  # type: ignore[attr-defined]
    assert call.name == "memory" and len(call.arguments) == MAX_REPLY_CHARS
    assert reply.finish_reason == "length"  # type: ignore[attr-defined]


def test_streamed_tool_calls_are_put_together(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(Reply.tool_call("session_search", {"query": "bank"}, call_id="c7"))
    seen: list[str] = []
    reply = stream(client(fake_llm), seen)
    (call,) = reply.tool_calls  # type: ignore[attr-defined]
    assert (call.id, call.name, call.arguments) == ("c7", "session_search", '{"query": "bank"}')
    assert seen == []


@pytest.mark.parametrize(
    "broken",
    [
        Reply(text="cut off here", pieces=["cut ", "off ", "here"], break_after=2),
        Reply(text="cut off here", pieces=["cut ", "off ", "here"], stream_error_after=2),
        Reply(status=400),  # an endpoint that refuses streaming
    ],
    ids=["dropped", "error-event", "refused"],
)
def test_a_broken_stream_is_asked_again_whole(fake_llm: FakeOpenAI, broken: Reply) -> None:
    fake_llm.push(broken, Reply(text="the complete answer"))
    seen: list[str] = []
    reply = stream(client(fake_llm), seen)
    assert reply.content == "the complete answer"  # type: ignore[attr-defined]
    assert [bool(r.get("stream")) for r in fake_llm.requests] == [True, False]


def test_a_rate_limited_stream_is_retried_by_the_sdk(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(Reply(status=429, retry_after=0.2), Reply(text="after the wait"))
    seen: list[str] = []
    reply = stream(client(fake_llm), seen)
    assert reply.content == "after the wait" and seen[-1] == "after the wait"  # type: ignore[attr-defined]
    assert all(r.get("stream") for r in fake_llm.requests)


def test_a_stream_that_keeps_failing_is_a_clear_error(fake_llm: FakeOpenAI) -> None:
    fake_llm.default = Reply(status=503)
    with pytest.raises(LLMError, match="HTTP 503"):
        stream(client(fake_llm, max_retries=1), [])


def test_a_stream_that_trickles_forever_meets_the_overall_deadline(fake_llm: FakeOpenAI) -> None:
    """Each piece arrives well within the per-read timeout; the call as a whole must end."""
    fake_llm.push(Reply(text="x" * 400, pieces=["x"] * 400, piece_delay=0.1))
    seen: list[str] = []
    # a deadline the first pieces meet on a loaded machine too (40 s of pieces in all)
    with pytest.raises(LLMError, match=r"not answering \(no complete reply within 2 s\)"):
        stream(client(fake_llm, timeout=3.0, deadline=2.0), seen)
    assert seen and len(seen[-1]) < 400  # it had begun, and was cut off


def test_retries_of_a_plain_call_are_inside_the_deadline_too(fake_llm: FakeOpenAI) -> None:
    fake_llm.push(*[Reply(text="late", delay=0.4)] * 4)
    with pytest.raises(LLMError, match=r"within 0.5 s"):
        ask(client(fake_llm, timeout=0.3, max_retries=3, deadline=0.5))


def test_side_calls_are_metered_for_the_person_they_are_made_for(
    fake_llm: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """The client's meter gets each call's tokens with the person `charged_to` names
    (streamed or not, `chat` or `text`, and in a task started inside); a call for nobody
    or inside `uncharged` is not metered; a meter that fails does not fail the call."""
    from hermes.llm.metering import charged_to, uncharged

    counted: list[tuple[str, int, int, str]] = []
    broken = False

    async def meter(user_id: str, prompt: int, completion: int, model: str) -> None:
        if broken:
            raise OSError("disk full")
        counted.append((user_id, prompt, completion, model))

    llm = client(fake_llm)
    llm.meter = meter
    fake_llm.default = Reply(text="fine", prompt_tokens=7, completion_tokens=3)
    hello = [{"role": "user", "content": "hi"}]

    async def go() -> str:
        nonlocal broken
        try:
            await llm.chat(hello)  # nobody's
            with charged_to("u_a"):
                await llm.chat(hello)
                await llm.chat(hello, on_text=lambda _text: None)  # streamed
                await llm.text(hello)
                with uncharged():
                    await llm.chat(hello)  # counted elsewhere (a turn's reply)
                with charged_to("u_b"):
                    await asyncio.create_task(llm.chat(hello))
            broken = True
            with charged_to("u_a"):
                return (await llm.chat(hello)).content or ""
        finally:
            await llm.close()

    assert asyncio.run(go()) == "fine"
    a, b = ("u_a", 7, 3, "fake-model"), ("u_b", 7, 3, "fake-model")
    assert counted == [a, a, a, b]
    assert "tokens of a call for u_a not counted: disk full" in caplog.text
