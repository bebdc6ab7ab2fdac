"""`group_scope: per_chat`: a group chat is one conversation for everyone in it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gateway.admission.intake import IntakePolicy
from gateway.admission.session_key import Scope
from gateway.pipeline.router import Router, RouterPolicy
from hermes.config import MemoryConfig
from hermes.memory.store import Target
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from hermes.state.people import PeopleDB
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm, group, scenario

SHARED = RouterPolicy(intake=IntakePolicy(group_scope=Scope.PER_CHAT))


def remember_for_bob(request: dict[str, Any]) -> Reply:
    last = request["messages"][-1]
    if last["role"] == "tool":
        return Reply(text="noted")
    if "remember" in str(last["content"]):
        args = {"action": "add", "target": "user", "content": "Bob plays the cello"}
        return Reply.tool_call("memory", args)
    return Reply(text="ok")


def test_everyone_in_a_per_chat_group_shares_one_conversation(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = remember_for_bob

    async def body(router: Router, adapter: FakeAdapter) -> None:
        alice = router.db.people.user_for_identity("fakechat", "alice")
        UserMemory(home, alice, MemoryConfig()).store(Target.USER).mutate(
            lambda state: (["Alice's private note: allergic to kiwi"], None)
        )
        await adapter.deliver(group("alice", "@bot hello all", mentioned=True))
        await adapter.wait_for(1)
        await adapter.deliver(group("bob", "@bot remember I play the cello", mentioned=True))
        await adapter.wait_for(2)
        await asyncio.sleep(0.1)

    scenario(home, fake_llm, body, SHARED)
    last = fake_llm.requests[-1]["messages"]
    said = [str(m["content"]) for m in last if m["role"] == "user"]
    assert said[0].startswith("[alice] @bot hello all")  # bob's turn sees alice's words
    assert said[1].startswith("[bob] @bot remember")
    assert "kiwi" not in last[0]["content"]  # no personal store in a shared prompt
    db = SessionDB.open(home)
    try:
        bob = db.people.user_for_identity("fakechat", "bob")
        alice = db.people.user_for_identity("fakechat", "alice")
        assert (
            db.conversations.list_sessions(bob) == []
            and db.conversations.list_sessions(alice) == []
        )
        (shared,) = db.conversations.list_sessions(PeopleDB(db).chat_user("fakechat", "grp"))
        assert shared.shared and shared.session_key.endswith(":*")
        bob_profile = UserMemory(home, bob, MemoryConfig()).store(Target.USER).read()
        assert bob_profile.entries == ("Bob plays the cello",)  # the speaker's own store
        events = db.memory_log.memory_events(bob)
        assert events and events[0].session_id is not None
    finally:
        db.close()


def test_a_shared_sessions_search_sees_only_that_chat(home: Path, fake_llm: FakeOpenAI) -> None:
    def respond(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            return Reply(text="searched")
        if "search" in str(last["content"]):
            return Reply.tool_call("session_search", {"query": "zebra"})
        return Reply(text="ok")

    fake_llm.responder = respond

    async def body(router: Router, adapter: FakeAdapter) -> None:
        await adapter.deliver(dm("alice", "my secret word is zebra"))
        await adapter.wait_for(1)
        await adapter.deliver(group("alice", "@bot please search for it", mentioned=True))
        await adapter.wait_for(2)

    scenario(home, fake_llm, body, SHARED)
    (result,) = [
        json.loads(m["content"]) for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"
    ]
    assert result["success"] and result["results"] == []  # alice's DM is not the chat's
