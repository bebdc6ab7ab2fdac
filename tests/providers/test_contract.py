"""The memory-provider seam: the contract every provider meets, and the host calling
it at its five points through the real app (router, agent, memory service)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gateway.router import Router
from hermes.providers.base import (
    AgentContext,
    MemoryProvider,
    MemoryWrite,
    NoProvider,
    ProviderSession,
)
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm, scenario

T = TypeVar("T")
RECALL = "The user's cat is called Miso."
BLOCK = "## Deep memory\nA recorder provider is on."


class RecordingProvider:
    """A provider that remembers every call the host makes."""

    name = "recorder"

    def __init__(self, *, prefetch_delay: float = 0.0, fail: bool = False) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.prefetch_delay, self.fail = prefetch_delay, fail

    def _called(self, what: str, value: Any) -> None:
        self.calls.append((what, value))
        if self.fail:
            raise RuntimeError(f"provider {what} is broken")

    def system_prompt_block(self, session: ProviderSession) -> str:
        self._called("block", session)
        return BLOCK

    async def prefetch(self, query: str, session: ProviderSession) -> str:
        self._called("prefetch", (query, session))
        await asyncio.sleep(self.prefetch_delay)
        return RECALL

    async def sync_turn(
        self,
        user_text: str,
        assistant_text: str,
        session: ProviderSession,
        messages: list[dict[str, Any]],
    ) -> None:
        self._called("sync", (user_text, assistant_text, session))

    def on_memory_write(self, write: MemoryWrite) -> None:
        self._called("write", write)

    async def on_session_end(
        self, session: ProviderSession, messages: list[dict[str, Any]]
    ) -> None:
        self._called("end", (session, len(messages)))

    def named(self, what: str) -> list[Any]:
        return [value for name, value in self.calls if name == what]


def live(
    home: Path,
    fake: FakeOpenAI,
    provider: MemoryProvider,
    body: Callable[[Router, FakeAdapter], Awaitable[T]],
) -> T:
    return scenario(home, fake, body, provider=provider)


def remembering(request: dict[str, Any]) -> Reply:
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Reply(text="saved")
    text = str(last["content"])
    if "remember" in text:
        args = {"action": "add", "target": "user", "content": "Has a cat called Miso"}
        return Reply.tool_call("memory", args)
    if "rename" in text:
        args = {
            "action": "replace",
            "target": "user",
            "old_text": "Miso",
            "content": "Has a cat called Mochi",
        }
        return Reply.tool_call("memory", args)
    return Reply(text="hello")


# -- the contract: every provider, shipped or test double --------------------------------


@pytest.mark.parametrize("make", [NoProvider, RecordingProvider], ids=["builtin", "recorder"])
def test_every_provider_answers_the_contract(make: Callable[[], MemoryProvider]) -> None:
    provider = make()
    session = ProviderSession("s_1", "u_0123456789abcdef", "cli", AgentContext.PRIMARY)

    async def go() -> None:
        assert isinstance(provider.name, str) and provider.name
        assert isinstance(provider.system_prompt_block(session), str)
        assert isinstance(await provider.prefetch("what is my cat called?", session), str)
        assert await provider.sync_turn("hi", "hello", session, []) is None
        write = MemoryWrite("add", "user", "x", None, session.user_id, "agent")
        assert provider.on_memory_write(write) is None
        assert await provider.on_session_end(session, []) is None

    asyncio.run(go())


# -- the host: the five points -----------------------------------------------------------


def test_the_agent_calls_the_provider_at_each_point(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = remembering
    recorder = RecordingProvider()

    async def body(router: Router, adapter: FakeAdapter) -> str:
        for n, text in enumerate(
            ["hi", "please remember my cat", "rename the cat", "/memory forget Mochi", "/new"], 1
        ):
            await adapter.deliver(dm("alice", text))
            await adapter.wait_for(n)
        await asyncio.sleep(0.2)  # sync and session-end run in the background
        return router.db.people.user_for_identity("fakechat", "alice")

    alice = live(home, fake_llm, recorder, body)
    first_prompt = fake_llm.requests[0]["messages"][0]["content"]
    assert first_prompt.endswith(BLOCK)  # static block, frozen into the session's prompt
    assert all(r["messages"][0]["content"] == first_prompt for r in fake_llm.requests)
    first_user = fake_llm.requests[0]["messages"][-1]["content"]
    assert RECALL in first_user and "<recalled-memory" in first_user  # fenced, on the message
    queries = [query for query, _ in recorder.named("prefetch")]
    assert queries == ["hi", "please remember my cat", "rename the cat"]
    synced = [(u, a) for u, a, _ in recorder.named("sync")]
    assert synced == [
        ("hi", "hello"),
        ("please remember my cat", "saved"),
        ("rename the cat", "saved"),
    ]
    writes = recorder.named("write")
    assert [(w.action, w.user_id) for w in writes] == [
        ("add", alice),
        ("replace", alice),
        ("remove", alice),
    ]
    assert writes[1].before == "Has a cat called Miso" and writes[2].actor == "user"
    ((ended, count),) = recorder.named("end")
    assert ended.user_id == alice and count > 0
    assert all(s.user_id == alice for _, s in recorder.named("prefetch"))


def test_a_slow_prefetch_never_holds_the_turn(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.default = Reply(text="on time")
    slow = RecordingProvider(prefetch_delay=30)

    async def body(router: Router, adapter: FakeAdapter) -> float:
        started = time.monotonic()
        await adapter.deliver(dm("alice", "hello"))
        await adapter.wait_for(1, timeout=20)
        return time.monotonic() - started

    elapsed = live(home, fake_llm, slow, body)
    assert elapsed < 10
    assert RECALL not in fake_llm.requests[0]["messages"][-1]["content"]


def test_a_failing_provider_never_fails_a_turn_or_a_memory_write(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = remembering
    broken = RecordingProvider(fail=True)

    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        await adapter.deliver(dm("alice", "please remember my cat"))
        await adapter.wait_for(1)
        await adapter.deliver(dm("alice", "/memory show user"))
        await adapter.wait_for(2)
        return adapter.texts()

    texts = live(home, fake_llm, broken, body)
    assert texts[0] == "saved" and "Has a cat called Miso" in texts[1]
    assert BLOCK not in fake_llm.requests[0]["messages"][0]["content"]
