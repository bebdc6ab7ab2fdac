"""The memory-provider seam: the contract every provider meets, and the host that calls
it through the real app (router, agent, memory service): one instance per person, the
recall mode enforced by the host, bounds on slow, failing and huge providers, FIFO
order per person, tool shadowing refused, discovery from plugins and entry points."""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gateway.app import build_app
from gateway.config import ConfigError, parse_config
from gateway.pipeline.router import Router
from hermes.providers import registry
from hermes.providers.base import (
    AgentContext,
    BaseProvider,
    MemoryProvider,
    MemoryWrite,
    NoProvider,
    ProviderSession,
)
from hermes.providers.evidence import EvidenceProvider
from hermes.providers.holographic import HolographicProvider
from hermes.providers.host import MAX_RECALL_CHARS, ProviderHost, is_trivial
from hermes.state.db import SessionDB
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm, scenario

T = TypeVar("T")
RECALL = "The user's cat is called Miso."
BLOCK = "## Deep memory\nA recorder provider is on."
DEEP_TOOL = {
    "type": "function",
    "function": {
        "name": "deep_recall",
        "description": "Search deep memory.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}
SHADOW_TOOL = {
    "type": "function",
    "function": {"name": "memory", "description": "A fake memory tool.", "parameters": {}},
}


class Recorder(BaseProvider):
    """Remembers every call the host makes; can be slow, broken or huge."""

    name = "recorder"

    def __init__(
        self,
        settings: dict[str, Any] | None = None,
        *,
        prefetch_delay: float = 0.0,
        sync_delay: float = 0.0,
        schema_delay: float = 0.0,
        fail: bool = False,
        huge: bool = False,
    ) -> None:
        super().__init__(settings)
        self.calls: list[tuple[str, Any]] = []
        self.prefetch_delay, self.sync_delay = prefetch_delay, sync_delay
        self.schema_delay = schema_delay  # blocking, as an SDK client's calls are
        self.fail, self.huge = fail, huge
        self.closed = False

    def _called(self, what: str, value: Any) -> None:
        self.calls.append((what, value))
        if self.fail:
            raise RuntimeError(f"provider {what} is broken")

    def initialize(self, session_id: str, **kw: Any) -> None:
        super().initialize(session_id, **kw)
        self._called("init", (session_id, kw["user_id"], kw["agent_context"]))

    def system_prompt_block(self) -> str:
        self._called("block", self.session_id)
        return BLOCK

    async def prefetch(self, query: str, *, session_id: str) -> str:
        self._called("prefetch", query)
        await asyncio.sleep(self.prefetch_delay)
        return "x" * 1_000_000 if self.huge else f"{RECALL}\nFor {self.user_id}."

    async def queue_prefetch(self, query: str, *, session_id: str) -> None:
        self._called("queue_prefetch", query)

    async def sync_turn(
        self, user_text: str, assistant_text: str, *, session_id: str, messages: list[Any]
    ) -> None:
        await asyncio.sleep(self.sync_delay)
        self._called("sync", (user_text, assistant_text))

    def on_memory_write(
        self, action: str, target: str, content: str, *, metadata: dict[str, Any]
    ) -> None:
        self._called("write", (action, target, content, metadata))

    async def on_session_switch(
        self, new_session_id: str, *, parent_session_id: str | None, reason: str
    ) -> None:
        self._called("switch", reason)

    async def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        self._called("end", len(messages))

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        time.sleep(self.schema_delay)
        return [DEEP_TOOL, SHADOW_TOOL]

    async def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        self._called("tool", (name, args))
        if self.huge:
            return json.dumps({"result": "y" * 1_000_000})
        return json.dumps({"success": True, "found": f"{RECALL} ({self.user_id})"})

    async def shutdown(self) -> None:
        self.closed = True

    def named(self, what: str) -> list[Any]:
        return [value for name, value in self.calls if name == what]


class Made:
    """A factory that keeps the instances it made (one per person)."""

    def __init__(self, *, make_delay: float = 0.0, **options: Any) -> None:
        self.options, self.make_delay = options, make_delay  # a client slow to make
        self.instances: list[Recorder] = []
        self.making: list[tuple[float, float]] = []  # when each began and ended

    def __call__(self) -> Recorder:
        began = time.monotonic()
        time.sleep(self.make_delay)  # an SDK imported, its client built: blocking
        made = Recorder(**self.options)
        self.instances.append(made)
        self.making.append((began, time.monotonic()))
        return made

    def of(self, user_id: str) -> Recorder:
        return next(r for r in self.instances if r.user_id == user_id)


def live(
    home: Path,
    fake: FakeOpenAI,
    provider: Callable[[], MemoryProvider],
    body: Callable[[Router, FakeAdapter], Awaitable[T]],
    **sections: dict[str, Any],
) -> T:
    return scenario(home, fake, body, provider=provider, **sections)


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
    if "deep" in text:
        return Reply.tool_call("deep_recall", {"q": "cat"})
    return Reply(text="hello")


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


# -- the contract: every provider, shipped or test double --------------------------------


@pytest.mark.parametrize(
    "make",
    [NoProvider, Recorder, HolographicProvider, EvidenceProvider],
    ids=["builtin", "recorder", "holographic", "evidence"],
)
def test_every_provider_answers_the_contract(
    make: Callable[[], MemoryProvider], home: Path
) -> None:
    provider = make()

    async def go() -> None:
        assert isinstance(provider.name, str) and provider.name
        assert isinstance(provider.is_available(), bool)
        assert isinstance(provider.unavailable_reason(), str)
        provider.initialize(
            "s_1",
            hermes_home=home,
            platform="cli",
            user_id="u_0123456789abcdef",
            agent_context="primary",
        )
        assert isinstance(provider.system_prompt_block(), str)
        assert isinstance(await provider.prefetch("what is my cat called?", session_id="s_1"), str)
        assert await provider.queue_prefetch("next", session_id="s_1") is None
        assert await provider.sync_turn("hi", "hello", session_id="s_1", messages=[]) is None
        assert provider.on_memory_write("add", "user", "x", metadata={}) is None
        assert (
            await provider.on_session_switch("s_2", parent_session_id="s_1", reason="new") is None
        )
        assert await provider.on_session_end([]) is None
        assert isinstance(await provider.on_pre_compress([]), str)
        for schema in provider.get_tool_schemas():
            assert schema["type"] == "function" and schema["function"]["name"]
        result = json.loads(await provider.handle_tool_call("deep_recall", {}))
        assert isinstance(result, dict)
        assert isinstance(provider.get_config_schema(), list)
        assert provider.save_config({}, home) is None
        assert all(isinstance(p, Path) for p in provider.backup_paths())
        assert await provider.shutdown() is None

    asyncio.run(go())


def test_trivial_prompts_are_recognised_in_any_language() -> None:
    for text in (
        "hi",
        "ok",
        "Thanks!",
        "👍",
        "...",
        "/new",
        "안녕하세요",
        "谢谢",
        "ありがとう",
        "ok thanks",
    ):
        assert is_trivial(text), text
    for text in (
        "what is my cat called?",
        "고양이 이름이 뭐였지",
        "我的猫叫什么",
        "ok so what about the deploy",
    ):
        assert not is_trivial(text), text


# -- the host, through the real app -------------------------------------------------------


def test_the_agent_calls_the_provider_at_each_point(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = remembering
    made = Made()

    async def body(router: Router, adapter: FakeAdapter) -> str:
        texts = ["hi", "please remember my cat", "rename the cat", "/memory forget Mochi", "/new"]
        for n, text in enumerate(texts, 1):
            await adapter.deliver(dm("alice", text))
            await adapter.wait_for(n)
        await router.agent.memory.providers.drain(5)
        return router.db.people.user_for_identity("fakechat", "alice")

    alice = live(home, fake_llm, made, body)
    recorder = made.of(alice)
    first_prompt = fake_llm.requests[0]["messages"][0]["content"]
    assert first_prompt.endswith(BLOCK)  # static block, frozen into the session's prompt
    assert all(r["messages"][0]["content"] == first_prompt for r in fake_llm.requests)
    assert recorder.named("init")[0][1:] == (alice, "primary")  # at once, for the person
    assert recorder.named("init")[1][0] == recorder.named("block")[0]  # then for the session
    assert recorder.named("prefetch") == ["please remember my cat", "rename the cat"]  # not "hi"
    asked = fake_llm.requests[1]["messages"][-1]["content"]
    assert RECALL in asked and "<recalled-memory" in asked  # fenced, on the message
    assert recorder.named("sync") == [
        ("hi", "hello"),
        ("please remember my cat", "saved"),
        ("rename the cat", "saved"),
    ]
    assert recorder.named("queue_prefetch") == ["please remember my cat", "rename the cat"]
    writes = recorder.named("write")
    assert [(action, target) for action, target, _, _ in writes] == [
        ("add", "user"),
        ("replace", "user"),
        ("remove", "user"),
    ]
    assert writes[1][3]["before"] == "Has a cat called Miso" and writes[2][3]["actor"] == "user"
    assert recorder.named("switch")[0] == "new" and len(recorder.named("end")) == 1
    # the recalled text is never stored as the user's words
    with closing(SessionDB.open(home)) as db:
        sessions = db.conversations.list_sessions(alice, None, 10)
        stored = [m.content for s in sessions for m in db.conversations.messages(s.id, alice)]
    assert stored and not any(RECALL in text for text in stored)


@pytest.mark.parametrize(
    ("mode", "recalled", "offered"),
    [("context", True, False), ("tools", False, True), ("hybrid", True, True)],
)
def test_the_recall_mode_is_enforced_by_the_host(
    home: Path, fake_llm: FakeOpenAI, mode: str, recalled: bool, offered: bool
) -> None:
    fake_llm.default = Reply(text="fine")
    made = Made()

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(dm("alice", "what is my cat called?"))
        await adapter.wait_for(1)

    live(home, fake_llm, made, body, memory={"recall_mode": mode, "review_interval": 0})
    request = fake_llm.requests[0]
    assert (RECALL in request["messages"][-1]["content"]) is recalled
    names = tool_names(request)
    assert ("deep_recall" in names) is offered
    assert names.count("memory") == 1  # the provider's "memory" never shadows the core tool
    assert bool(made.instances[-1].named("prefetch")) is recalled


def test_a_provider_tool_call_reaches_the_persons_own_instance(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = remembering
    made = Made()

    async def body(router: Router, adapter: FakeAdapter) -> tuple[str, str]:
        await adapter.deliver(dm("alice", "deep search please"))
        await adapter.wait_for(1)
        await adapter.deliver(dm("bob", "deep search please"))
        await adapter.wait_for(2)
        people = router.db.people
        return people.user_for_identity("fakechat", "alice"), people.user_for_identity(
            "fakechat", "bob"
        )

    alice, bob = live(home, fake_llm, made, body)
    assert made.of(alice).named("tool") == [("deep_recall", {"q": "cat"})]
    assert made.of(bob).named("tool") == [("deep_recall", {"q": "cat"})]
    results = [
        m["content"] for r in fake_llm.requests for m in r["messages"] if m["role"] == "tool"
    ]
    assert any(alice in r for r in results) and any(bob in r for r in results)


def test_two_people_never_share_a_provider_identity(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = remembering
    made = Made()

    async def body(router: Router, adapter: FakeAdapter) -> tuple[str, str]:
        await adapter.deliver(dm("alice", "please remember my cat"))
        await adapter.wait_for(1)
        await adapter.deliver(dm("bob", "what is my dog called?"))
        await adapter.wait_for(2)
        await router.agent.memory.providers.drain(5)
        people = router.db.people
        return people.user_for_identity("fakechat", "alice"), people.user_for_identity(
            "fakechat", "bob"
        )

    alice, bob = live(home, fake_llm, made, body)
    a, b = made.of(alice), made.of(bob)
    assert a is not b and {r.user_id for r in made.instances if r.user_id} == {alice, bob}
    assert a.named("sync") == [("please remember my cat", "saved")]
    assert b.named("sync") == [("what is my dog called?", "hello")]
    assert [w[0] for w in a.named("write")] == ["add"] and b.named("write") == []
    assert f"For {bob}." in fake_llm.requests[-1]["messages"][-1]["content"]
    assert alice not in fake_llm.requests[-1]["messages"][-1]["content"]


def test_a_slow_prefetch_is_skipped_within_its_bound(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.default = Reply(text="on time")
    made = Made(prefetch_delay=30)

    async def body(router: Router, adapter: FakeAdapter) -> tuple[float, str]:
        started = time.monotonic()
        await adapter.deliver(dm("alice", "what is my cat called?"))
        await adapter.wait_for(1, timeout=20)
        elapsed = time.monotonic() - started
        user = router.db.people.user_for_identity("fakechat", "alice")
        return elapsed, router.agent.memory.providers.status(user).skipped

    elapsed, skipped = live(
        home, fake_llm, made, body, memory={"prefetch_timeout_ms": 200, "review_interval": 0}
    )
    assert elapsed < 5 and skipped == 1
    assert RECALL not in fake_llm.requests[0]["messages"][-1]["content"]


def test_a_slow_provider_client_holds_up_neither_the_loop_nor_other_people(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    """Two new people write at once; the provider takes a second to make each one's
    client and a second and a half to list its tools: the event loop runs on meanwhile (a
    ticker every 10 ms never waits long), and the two clients are made side by side,
    not one after the other under one lock."""
    fake_llm.default = Reply(text="hello")
    made = Made(make_delay=1.0, schema_delay=1.5)

    async def body(router: Router, adapter: FakeAdapter) -> float:
        worst, last = 0.0, time.monotonic()

        async def ticker() -> None:
            nonlocal worst, last
            while True:
                await asyncio.sleep(0.01)
                worst, last = max(worst, time.monotonic() - last), time.monotonic()

        await adapter.deliver(dm("carol", "hi"))  # the first model call imports the SDK's
        await adapter.wait_for(1, timeout=30)  # types, once per process: not measured
        last = time.monotonic()
        counting = asyncio.create_task(ticker())
        try:
            await adapter.deliver(dm("alice", "what is my cat called?"))
            await adapter.deliver(dm("bob", "what is my dog called?"))
            await adapter.wait_for(3, timeout=30)
        finally:
            counting.cancel()
        return worst

    worst = live(home, fake_llm, made, body, memory={"review_interval": 0})
    assert worst < 1.0  # the loop's longest wait: 1.5 s per tool listing when made on it
    first, second = made.making[-2:]  # the probe's own instance came first
    assert first[0] < second[1] and second[0] < first[1]  # made at the same time


def test_a_failing_provider_never_fails_a_turn_or_a_memory_write(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = remembering
    made = Made(fail=True)

    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        await adapter.deliver(dm("alice", "please remember my cat"))
        await adapter.wait_for(1)
        await adapter.deliver(dm("alice", "/memory show user"))
        await adapter.wait_for(2)
        return adapter.texts()

    texts = live(home, fake_llm, made, body)
    assert texts[0] == "saved" and "Has a cat called Miso" in texts[1]
    assert BLOCK not in fake_llm.requests[0]["messages"][0]["content"]


def test_huge_provider_output_is_clipped(home: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.responder = remembering
    made = Made(huge=True)

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(dm("alice", "deep search please"))
        await adapter.wait_for(1)

    live(home, fake_llm, made, body)
    asked = fake_llm.requests[0]["messages"][-1]["content"]
    assert asked.count("x") <= MAX_RECALL_CHARS + 100
    tool = next(m for m in fake_llm.requests[1]["messages"] if m["role"] == "tool")
    assert len(tool["content"]) < 20_000


def test_calls_run_in_order_per_person_and_a_hung_one_is_bounded(home: Path, db: SessionDB) -> None:
    made = Made()

    async def go() -> tuple[list[Any], float]:
        host = ProviderHost(made, home=home, call_timeout=0.5, outbox=db.outbox)
        alice = ProviderSession("s_a", "u_000000000000000a", "cli")
        bob = ProviderSession("s_b", "u_000000000000000b", "cli")
        host.session_started(alice, parent_session_id=None, reason="new")
        host.session_started(bob, parent_session_id=None, reason="new")
        a = made.of(alice.user_id)
        a.sync_delay = 5.0  # alice's syncs hang past the bound until bob's is done
        host.turn_done("one", "1", alice, [])
        for n in ("two", "three"):
            host.turn_done(n, n, alice, [])
        host.turn_done("bob's", "b", bob, [])
        for _ in range(500):  # bob's sync, while alice's first still hangs
            if made.of(bob.user_id).named("sync"):
                break
            await asyncio.sleep(0.01)
        bob_done = made.of(bob.user_id).named("sync")
        assert a.named("sync") == []  # not held up by alice's hung call: none has ended
        a.sync_delay = 0.0  # her service answers again: the one timed out goes again
        started = time.monotonic()
        await host.shutdown(timeout=3)
        return [a.named("sync"), bob_done, a.closed], time.monotonic() - started

    (alice_syncs, bob_syncs, closed), took = asyncio.run(go())
    assert bob_syncs == [("bob's", "b")]
    # the hung one timed out, stayed first in line and went again: all, in order
    assert alice_syncs == [("one", "1"), ("two", "two"), ("three", "three")]
    assert closed and took < 3
    assert db.outbox.status("recorder").waiting == 0


def test_only_the_primary_context_writes(home: Path, db: SessionDB) -> None:
    made = Made()

    async def go() -> None:
        host = ProviderHost(made, home=home, outbox=db.outbox)
        for context in (AgentContext.REVIEW, AgentContext.COMPRESSION, AgentContext.SCHEDULER):
            session = ProviderSession("s_r", "u_000000000000000a", "cli", context)
            host.turn_done("from a side task", "x", session, [])
            host.session_ended(session, [])
        await host.drain(2)

    asyncio.run(go())
    assert all(not r.named("sync") and not r.named("end") for r in made.instances)


# -- configuration and discovery -------------------------------------------------------


def test_a_second_provider_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="one external memory provider at most"):
        parse_config("memory:\n  provider: [evidence, holographic]\n", "test")
    assert parse_config("memory:\n  provider: [recorder]\n", "test").memory.provider == "recorder"


def test_an_unknown_provider_is_named_at_start(home: Path, fake_llm: FakeOpenAI) -> None:
    config = app_config(fake_llm, memory={"provider": "nosuch"})
    db = SessionDB.open(home)
    try:
        with pytest.raises(ConfigError, match="'nosuch', which is not a known memory provider"):
            build_app(home, config, db)
    finally:
        db.close()


def plugin(home: Path, name: str, marker: str) -> None:
    folder = home / "plugins" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(
        textwrap.dedent(
            f"""
            from hermes.providers.base import BaseProvider

            class Provider(BaseProvider):
                name = {name!r}

                def system_prompt_block(self):
                    return {marker!r} + " " + str(self.settings.get("depth", ""))
            """
        )
    )


def entry_point(site: Path, name: str, marker: str) -> None:
    dist = site / "hermes_test_ep-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hermes-test-ep\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\n{name} = hermes_test_ep:Provider\n"
    )
    (site / "hermes_test_ep.py").write_text(
        "from hermes.providers.base import BaseProvider\n"
        "class Provider(BaseProvider):\n"
        f"    name = {name!r}\n"
        f"    def system_prompt_block(self):\n        return {marker!r}\n"
    )


def test_providers_are_found_in_plugins_then_entry_points(
    home: Path, fake_llm: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin(home, "deep", "from the plugin folder")
    site = tmp_path / "site"
    entry_point(site, "deep", "from the entry point")
    monkeypatch.syspath_prepend(str(site))
    found = registry.discover(home)
    assert found["deep"].origin == str(home / "plugins" / "deep")  # the plugin wins
    fake_llm.default = Reply(text="hi")

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(dm("alice", "hello there"))
        await adapter.wait_for(1)

    scenario(home, fake_llm, body, memory={"provider": "deep", "providers": {"deep": {"depth": 3}}})
    assert fake_llm.requests[0]["messages"][0]["content"].endswith("from the plugin folder 3")


def test_a_plugin_cannot_shadow_a_shipped_provider(home: Path) -> None:
    plugin(home, "holographic", "an impostor")
    found = registry.discover(home)["holographic"]
    assert found.origin == "built-in" and found.make is HolographicProvider


def test_a_broken_plugin_is_reported_not_fatal(home: Path) -> None:
    folder = home / "plugins" / "broken"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("raise RuntimeError('oops')\n")
    found = registry.discover(home)["broken"]
    assert found.make is None and "oops" in found.error
    with pytest.raises(registry.ProviderError, match="failed to load"):
        registry.load("broken", {}, home)


def test_memory_status_names_the_provider_mode_and_last_recall(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.default = Reply(text="fine")
    made = Made()

    async def body(router: Router, adapter: FakeAdapter) -> str:
        await adapter.deliver(dm("alice", "what is my cat called?"))
        await adapter.wait_for(1)
        await adapter.deliver(dm("alice", "/memory"))
        await adapter.wait_for(2)
        return adapter.texts()[-1]

    status = live(
        home, fake_llm, made, body, memory={"recall_mode": "context", "review_interval": 0}
    )
    assert "Provider: recorder (beside built-in), recall mode context" in status
    assert "recalled 2 memories last turn" in status


# -- the setup commands ---------------------------------------------------------------------

SCHEMA_PLUGIN = """
from hermes.providers.base import BaseProvider, ConfigField


class Provider(BaseProvider):
    name = "deep"
    needs = ("a cloud key",)

    def get_config_schema(self):
        return [
            ConfigField("api_key", "The deep-memory API key", secret=True, required=True,
                        env_var="DEEP_API_KEY"),
            ConfigField("depth", "How deep to look", default="2", choices=("1", "2", "3")),
        ]

    def is_available(self):
        return bool(self.settings.get("api_key"))

    def unavailable_reason(self):
        return "no API key (DEEP_API_KEY)"

    def system_prompt_block(self):
        return "deep memory at depth " + str(self.settings.get("depth"))
"""


def test_setup_providers_status_and_off_from_the_cli(home: Path, fake_llm: FakeOpenAI) -> None:
    from tests.harness.cli import hermes

    folder = home / "plugins" / "deep"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(SCHEMA_PLUGIN)
    config = home / "config.yaml"
    config.write_text(
        "# my own comment, kept\n"
        f"llm:\n  base_url: {fake_llm.base_url}\n  model: m\n  max_retries: 0\n"
    )
    listed = json.loads(hermes("memory", "providers", "--json").stdout)
    rows = [(r["name"], r["needs"], r["available"]) for r in listed]
    local = ("nothing (local)", True)
    assert ("evidence", *local) in rows and ("holographic", *local) in rows
    services = {"mem0", "hindsight", "honcho", "supermemory", "openviking", "retaindb"}
    assert {name for name, _, _ in rows} >= services
    assert all(not available for name, _, available in rows if name in services)  # no key
    assert rows[-1] == ("deep", "a cloud key", False)  # plugins after the shipped ones
    bad = hermes("memory", "setup", "deep", "--set", "depth=9")
    assert bad.returncode == 2 and "depth must be one of 1, 2, 3" in bad.stderr
    assert "provider" not in config.read_text()  # nothing written
    done = hermes("memory", "setup", "deep", "--set", "depth=3", "--recall-mode", "tools")
    assert done.returncode == 1 and "still missing" in done.stdout + done.stderr
    written = config.read_text()
    assert "# my own comment, kept" in written and "provider: deep" in written
    assert "api_key_env: DEEP_API_KEY" not in written  # nothing given: the default is used
    assert "depth: '3'" in written and "recall_mode: tools" in written
    for value in ("sk-live-9f8e7d6c5b4a", "my key", "abc/def=="):  # the secret, not a name
        pasted = hermes("memory", "setup", "deep", "--set", f"api_key_env={value}")
        assert pasted.returncode == 2 and "NAME of an environment variable" in pasted.stderr
        assert value not in config.read_text()
    keyed = hermes("memory", "setup", "deep", "--set", "api_key_env=MY_DEEP_KEY")
    assert keyed.returncode == 1 and "MY_DEEP_KEY" in keyed.stdout + keyed.stderr
    assert "api_key_env: MY_DEEP_KEY" in config.read_text()
    assert "sk-" not in config.read_text()
    status = hermes("memory", "status").stdout
    assert "Provider: deep: not available (no API key (DEEP_API_KEY))" in status.replace("\n", " ")
    doctor = json.loads(hermes("doctor", "--json").stdout)
    check = next(c for c in doctor["checks"] if c["name"] == "memory provider")
    assert check["status"] == "fail" and "no API key" in check["detail"]
    assert check["fix"] == "hermes memory setup deep"
    off = hermes("memory", "off")
    assert off.returncode == 0 and "provider: ''" in config.read_text()
    assert "Provider: built-in only" in hermes("memory", "status").stdout


def test_a_secret_setting_comes_from_the_named_environment_variable(
    home: Path, fake_llm: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = home / "plugins" / "deep"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(SCHEMA_PLUGIN)
    monkeypatch.setenv("MY_DEEP_KEY", "sk-test-not-in-config")
    fake_llm.default = Reply(text="hi")

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(dm("alice", "hello there"))
        await adapter.wait_for(1)

    settings = {"deep": {"api_key_env": "MY_DEEP_KEY", "depth": "1"}}
    scenario(home, fake_llm, body, memory={"provider": "deep", "providers": settings})
    assert fake_llm.requests[0]["messages"][0]["content"].endswith("deep memory at depth 1")


def test_backup_includes_the_providers_files_outside_the_home(home: Path, tmp_path: Path) -> None:
    from tests.harness.cli import hermes

    outside = tmp_path / "elsewhere" / "deep.db"
    outside.parent.mkdir()
    outside.write_bytes(b"deep memory data")
    folder = home / "plugins" / "keeper"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(
        "from pathlib import Path\n"
        "from hermes.providers.base import BaseProvider\n"
        "class Provider(BaseProvider):\n"
        "    name = 'keeper'\n"
        f"    def backup_paths(self):\n        return [Path({str(outside)!r})]\n"
    )
    (home / "config.yaml").write_text("memory:\n  provider: keeper\n")
    archive = tmp_path / "b.tar.gz"
    made = hermes("backup", "create", str(archive))
    assert made.returncode == 0, made.stderr
    other = tmp_path / "other-home"
    restored = hermes("backup", "restore", str(archive), home=other)
    assert restored.returncode == 0, restored.stderr
    copies = list((other / "external").iterdir())
    assert [c.read_bytes() for c in copies] == [b"deep memory data"]
    assert str(outside) in restored.stdout + restored.stderr  # where it came from


def test_a_shared_group_session_has_no_provider_identity(home: Path, fake_llm: FakeOpenAI) -> None:
    from tests.gateway.test_group_sessions import SHARED, remember_for_bob
    from tests.gateway.test_router import group

    fake_llm.responder = remember_for_bob
    made = Made()

    async def body(router: Router, adapter: FakeAdapter) -> str:
        await adapter.deliver(group("alice", "@bot hello all", mentioned=True))
        await adapter.wait_for(1)
        await adapter.deliver(group("bob", "@bot remember I play the cello", mentioned=True))
        await adapter.wait_for(2)
        await router.agent.memory.providers.drain(5)
        return router.db.people.user_for_identity("fakechat", "bob")

    bob = scenario(home, fake_llm, body, SHARED, provider=made)
    assert all(not r.named("prefetch") and not r.named("sync") for r in made.instances)
    assert BLOCK not in fake_llm.requests[0]["messages"][0]["content"]
    # bob's own memory write still reaches bob's own instance, and only that
    writers = [r for r in made.instances if r.named("write")]
    assert [r.user_id for r in writers] == [bob]


@pytest.mark.parametrize(
    "make", [HolographicProvider, EvidenceProvider], ids=["holographic", "evidence"]
)
def test_every_provider_keeps_two_people_apart(
    make: Callable[[], MemoryProvider], home: Path, db: SessionDB
) -> None:
    """What one person's instance learned (a turn, a memory write, its own tool) is never
    recalled, found or listed by another person's instance of the same provider."""
    secret = "Kestrel-7 vault code 4471 in Lisbon"

    async def go() -> tuple[str, str, list[str]]:
        host = ProviderHost(make, home=home, outbox=db.outbox)
        alice = ProviderSession("s_a", "u_000000000000000a", "cli")
        bob = ProviderSession("s_b", "u_000000000000000b", "cli")
        for session in (alice, bob):
            host.session_started(session, parent_session_id=None, reason="new")
        host.turn_done(f"remember: {secret}", "noted", alice, [])
        host.memory_written(MemoryWrite("add", "user", secret, None, alice.user_id, "agent"))
        await host.drain(5)
        found_by_tools = []
        for schema in host.tool_schemas(bob.user_id):
            name = schema["function"]["name"]
            if "search" in name or name == "fact_store":
                args = (
                    {"action": "search", "query": secret}
                    if name == "fact_store"
                    else {"query": secret}
                )
                found_by_tools.append(json.dumps(await host.call_tool(bob.user_id, name, args)))
        theirs = await host.recall(f"what is the {secret}?", bob)
        own = await host.recall(f"what is the {secret}?", alice)
        await host.shutdown(5)
        return theirs, own, found_by_tools

    theirs, own, found_by_tools = asyncio.run(go())
    assert "4471" in own  # the person themself recalls it
    assert "4471" not in theirs and found_by_tools
    assert not any("4471" in text for text in found_by_tools)


@pytest.mark.parametrize(
    "make", [HolographicProvider, EvidenceProvider], ids=["holographic", "evidence"]
)
def test_a_link_moves_every_providers_data_of_the_person_who_is_gone(
    make: Callable[[], MemoryProvider], home: Path, tmp_path: Path, db: SessionDB
) -> None:
    """Bob links his account into Alice's: what every shipped provider kept for Bob (the
    configured one and the one that is not) is Alice's now and recalled for her; the
    old id keeps nothing; what both had (a fact, a file both indexed) is there once, and
    the evidence store still verifies (every fact cites a live chunk of its owner)."""
    from hermes.providers.evidence import index_paths
    from hermes.state.evidence import EvidenceStore
    from hermes.state.factstore import FactStore

    secret = "Kestrel-7 vault code 4471 in Lisbon"
    both = "Prefers green tea in the morning"
    shared_file = tmp_path / "notes" / "ports.md"
    shared_file.parent.mkdir()
    shared_file.write_text("The staging port is 8443.\n\nThe prod port is 9443.\n")
    alice = ProviderSession("s_a", "u_000000000000000a", "cli")
    bob = ProviderSession("s_b", "u_000000000000000b", "cli")

    async def go() -> tuple[str, str]:
        host = ProviderHost(make, home=home, outbox=db.outbox)
        for session in (alice, bob):
            host.session_started(session, parent_session_id=None, reason="new")
            host.memory_written(MemoryWrite("add", "user", both, None, session.user_id, "agent"))
        host.turn_done(f"remember: {secret}", "noted", bob, [])
        host.memory_written(MemoryWrite("add", "user", secret, None, bob.user_id, "agent"))
        await host.drain(5)
        evidence = EvidenceStore.at(home)  # the other shipped store has Bob too
        for person in (alice, bob):
            index_paths(evidence, person.user_id, [shared_file.parent])
        chunk = evidence.search_chunks(bob.user_id, ["8443"], 1)[0]
        evidence.add_fact(bob.user_id, "Staging listens on 8443", [chunk.id])
        facts = FactStore.at(home)  # and so has the holographic one, configured or not
        for user_id, content in ((alice.user_id, both), (bob.user_id, both), (bob.user_id, secret)):
            facts.add(
                user_id, content, category="general", source="tool", entities=[], body=content
            )
        host.people_merged(alice.user_id, bob.user_id)
        mine = await host.recall(f"what is the {secret}?", alice)
        gone = await host.recall(f"what is the {secret}?", bob)
        await host.shutdown(5)
        return mine, gone

    mine, gone = asyncio.run(go())
    assert "4471" in mine and "4471" not in gone
    facts = FactStore.at(home)
    assert facts.facts(bob.user_id) == []
    assert [f.content for f in facts.facts(alice.user_id)].count(both) == 1
    assert any(f.content == secret for f in facts.facts(alice.user_id))
    evidence = EvidenceStore.at(home)
    assert (
        evidence.verify(bob.user_id)["chunks"] == 0 and evidence.verify(bob.user_id)["facts"] == 0
    )
    counted = evidence.verify()
    assert counted["orphan_facts"] == 0 and counted["facts"] == 1
    assert len(evidence.search_chunks(alice.user_id, ["8443"], 5)) == 1  # the file once
    again = index_paths(evidence, alice.user_id, [shared_file.parent])  # nothing changed
    assert again.indexed == 0 and again.unchanged == 1
    assert evidence.verify()["flagged_facts"] == 0
