"""Chat commands through the router: /stop, /memory in all its forms, DM-only content."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gateway.edge.events import MessageEvent
from gateway.pipeline.router import Router
from hermes.config import MemoryConfig
from hermes.memory.journal import run_recorded
from hermes.memory.store import Target
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from hermes.state.people import PeopleDB
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_router import dm, group, scenario
from tests.harness.wait import until


def test_stop_cancels_the_running_turn_and_its_reply_never_comes(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.push(Reply(text="a very late answer", delay=3))
    fake_llm.default = Reply(text="the next answer")

    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        await adapter.deliver(dm("alice", "think hard"))
        await until(lambda: len(fake_llm.requests) == 1, "the model asked")  # the turn waits
        await adapter.deliver(dm("alice", "/stop"))
        await adapter.wait_for(1)
        await adapter.deliver(dm("alice", "/stop"))  # nothing running now
        await adapter.wait_for(2)
        # the next message of the same session runs only after the turn before it ended:
        # had /stop not cancelled it, its answer would come first
        await adapter.deliver(dm("alice", "and now?"))
        await adapter.wait_for(3)
        return adapter.texts()

    texts = scenario(home, fake_llm, body)
    assert texts[0].startswith("Stopped.") and texts[1].startswith("Nothing to stop")
    assert texts[2] == "the next answer" and "a very late answer" not in texts


async def ask(adapter: FakeAdapter, event: MessageEvent) -> str:
    """Send one message; its whole reply (the fake's limit splits long ones)."""
    before = len(adapter.texts())
    await adapter.deliver(event)
    await adapter.wait_for(before + 1)
    await asyncio.sleep(0.1)
    return "\n".join(adapter.texts()[before:])


def seed(home: Path, user: str, *entries: str) -> UserMemory:
    memory = UserMemory(home, user, MemoryConfig())
    db = SessionDB.open(home)
    for entry in entries:
        run_recorded(
            MemoryTool(memory),
            db,
            {"action": "add", "target": "memory", "content": entry},
            actor="agent",
        )
    db.close()
    return memory


def test_memory_status_show_forget_undo_and_why(home: Path, fake_llm: FakeOpenAI) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> dict[str, Any]:
        await adapter.deliver(dm("alice", "hello"))  # alice becomes a user
        await adapter.wait_for(1)
        user = router.db.people.user_for_identity("fakechat", "alice")
        seed(home, user, "Owns a green bicycle", "Owns a red kettle")
        out: dict[str, Any] = {"user": user}
        for command in [
            "/memory",
            "/memory show memory",
            "/memory forget Owns",  # ambiguous
            "/memory forget bicycle",
            "/memory why bicycle",
            "/memory undo",
            "/memory forget unicorn",
            "/memory bogus",
        ]:
            out[command] = await ask(adapter, dm("alice", command))
        return out

    out = scenario(home, fake_llm, body)
    assert "Memory**: " in out["/memory"] and "2 entries" in out["/memory"]
    assert "Provider: built-in only" in out["/memory"]
    assert "1. Owns a green bicycle" in out["/memory show memory"]
    assert out["/memory forget Owns"].startswith("Several entries")
    assert out["/memory forget bicycle"].startswith("Forgotten")
    assert "add in memory by the assistant" in out["/memory why bicycle"]
    assert "remove in memory by you" in out["/memory why bicycle"]
    assert out["/memory undo"].startswith("Undid")
    assert out["/memory forget unicorn"].startswith("Nothing in your memory")
    assert out["/memory bogus"].startswith("Usage")
    memory = UserMemory(home, out["user"], MemoryConfig())
    assert memory.store(Target.MEMORY).read().entries == (
        "Owns a green bicycle",
        "Owns a red kettle",
    )
    assert len(fake_llm.requests) == 1  # only "hello" reached the model


def test_personal_content_is_only_shown_in_a_dm(home: Path, fake_llm: FakeOpenAI) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        commands = ["/memory show", "/memory why x", "/sessions", "/memory forget x", "/link"]
        commands.append("/memory")
        PeopleDB(router.db).set_role(
            router.db.people.user_for_identity("fakechat", "alice"), "admin"
        )
        commands.append("/admin users")
        return [await ask(adapter, group("alice", command)) for command in commands]

    texts = scenario(home, fake_llm, body)
    assert all(t.startswith("I only show that in a direct message") for t in texts[:5])
    assert "entries" in texts[5]  # usage numbers only: fine in a group
    assert texts[6].startswith("I only show that in a direct message")  # even for admins


def test_memory_consolidate_runs_now_with_the_model(home: Path, fake_llm: FakeOpenAI) -> None:
    entries = [f"Fact {i}: the user keeps notes in the blue folder" for i in range(3)]
    merged = {"entries": [{"text": "Fact 0, 1, 2: the user keeps notes in the blue folder",
                           "sources": [1, 2, 3]}], "dropped": []}  # fmt: skip
    fake_llm.responder = lambda body: Reply(text=json.dumps(merged))

    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        whoami = await ask(adapter, dm("alice", "/whoami"))
        seed(home, router.db.people.user_for_identity("fakechat", "alice"), *entries)
        return [whoami, await ask(adapter, dm("alice", "/memory consolidate"))]

    texts = scenario(home, fake_llm, body)
    assert "role user" in texts[0]
    assert "3 → 1 entries" in texts[1] and "/memory undo" in texts[1]


def test_unlink_detaches_an_account_and_whoami_shows_it(home: Path, fake_llm: FakeOpenAI) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        db = router.db
        alice = db.people.user_for_identity("fakechat", "alice")
        PeopleDB(db).merge_users(alice, db.people.user_for_identity("telegram", "1"))  # linked
        router.people.changed()
        before = await ask(adapter, dm("alice", "/whoami"))
        unlinked = await ask(adapter, dm("alice", "/unlink telegram"))
        again = await ask(adapter, dm("alice", "/unlink telegram"))
        after = await ask(adapter, dm("alice", "/whoami"))
        assert db.people.user_for_identity("telegram", "1") != alice
        return [before, unlinked, again, after]

    before, unlinked, again, after = scenario(home, fake_llm, body)
    assert "telegram" in before and "telegram" not in after
    assert unlinked.startswith("Unlinked your telegram account")
    assert again.startswith("No telegram account is linked")


def test_every_guard_in_the_table_is_enforced_by_the_dispatcher(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    """Walk the table itself: each DM-only row refuses in a group (even an admin), each
    admin row refuses a non-admin, with no handler code involved."""

    async def body(router: Router, adapter: FakeAdapter) -> list[tuple[str, str, str]]:
        db = router.db
        db.people.set_role(db.people.user_for_identity("fakechat", "carol"), "admin")
        out = []
        for row in router.commands.table:
            for sub in row.subcommands or (row,):
                text = row.name if sub is row else f"{row.name} {sub.name}"
                if sub.admin_only or row.admin_only:
                    out.append(("admin", text, await ask(adapter, dm("bob", text))))
                if sub.dm_only or row.dm_only:
                    out.append(("dm", text, await ask(adapter, group("carol", text))))
        return out

    results = scenario(home, fake_llm, body)
    assert results and fake_llm.requests == []
    for guard, text, reply in results:
        expected = "needs an admin" if guard == "admin" else "only show that in a direct message"
        assert expected in reply, (text, reply)


def test_help_and_the_platform_menus_come_from_the_table(home: Path, fake_llm: FakeOpenAI) -> None:
    async def body(
        router: Router, adapter: FakeAdapter
    ) -> tuple[str, list[tuple[str, bool]], list[str]]:
        help_text = await ask(adapter, dm("alice", "/help"))
        names = [(row.name, row.admin_only) for row in router.commands.table]
        menu = [entry.name for entry in router.commands.menu()]
        return help_text, names, menu

    help_text, names, menu = scenario(home, fake_llm, body)
    assert menu == [name[1:] for name, _ in names if name != "/confirm"]  # a button's
    for name, admin_only in names:
        assert (name in help_text) is not admin_only  # alice is not an admin


def test_admin_block_refuses_the_owners_own_account(home: Path, fake_llm: FakeOpenAI) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        people = PeopleDB(router.db)
        people.set_role(router.db.people.user_for_identity("fakechat", "alice"), "admin")
        people.set_role(router.db.people.user_for_identity("fakechat", "olga"), "owner")
        refused = await ask(adapter, dm("alice", "/admin block fakechat:olga"))
        blocked = await ask(adapter, dm("alice", "/admin block fakechat:bob"))
        still = await ask(adapter, dm("olga", "/memory"))
        return [refused, blocked, still]

    refused, blocked, still = scenario(home, fake_llm, body)
    assert refused.startswith("Not allowed") and "owner" in refused
    assert blocked.startswith("Blocked fakechat user bob")
    assert "entries" in still  # the owner is answered


def test_a_flood_of_forged_presses_meets_the_persons_rate_limit(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    from gateway.admission.intake import SLOW_DOWN, IntakePolicy
    from gateway.pipeline.router import RouterPolicy

    tight = RouterPolicy(intake=IntakePolicy(per_person_burst=5, per_person_per_minute=0.001))

    async def body(router: Router, adapter: FakeAdapter) -> FakeAdapter:
        for n in range(100):  # five different buttons, pressed in turn
            command = ("/whoami", "/stop", "/new", "/memory", "/sessions")[n % 5]
            await adapter.deliver(dm("alice", command, pressed=True))
        return adapter  # the router stops after this and waits for every press

    adapter = scenario(home, fake_llm, body, policy=tight)
    texts = adapter.texts()
    assert texts.count(SLOW_DOWN) == 1 and len(texts) == 6  # five presses and one notice


def test_the_same_button_pressed_twenty_times_runs_its_command_once(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    entries = [f"Fact {i}: the user keeps notes in the blue folder" for i in range(3)]
    merged = {"entries": [{"text": "Fact 0, 1, 2: the user keeps notes in the blue folder",
                           "sources": [1, 2, 3]}], "dropped": []}  # fmt: skip
    fake_llm.responder = lambda body: Reply(text=json.dumps(merged))

    async def body(router: Router, adapter: FakeAdapter) -> FakeAdapter:
        await ask(adapter, dm("alice", "/whoami"))
        seed(home, router.db.people.user_for_identity("fakechat", "alice"), *entries)
        for _ in range(20):
            await adapter.deliver(dm("alice", "/memory consolidate", pressed=True))
        return adapter

    adapter = scenario(home, fake_llm, body)
    assert len(fake_llm.requests) == 1  # one consolidation, one model call
    assert sum("3 → 1 entries" in t for t in adapter.texts()) == 1


def test_sessions_says_each_conversations_title_once(home: Path, fake_llm: FakeOpenAI) -> None:
    """A conversation's title is its first words: the preview under it is not printed when
    it only says the title again."""
    fake_llm.default = Reply(text="Sure, let's plan it.")

    async def body(router: Router, adapter: FakeAdapter) -> str:
        await ask(adapter, dm("alice", "Plan the trip to Porto"))
        await ask(adapter, dm("alice", "/new"))
        return await ask(adapter, dm("alice", "/sessions"))

    listed = scenario(home, fake_llm, body)
    assert listed.count("Plan the trip to Porto") == 1, listed


def test_dashboard_is_for_admins_and_says_when_nothing_serves_it(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> list[str]:
        alice = router.db.people.user_for_identity("fakechat", "alice")
        PeopleDB(router.db).set_role(alice, "admin")
        return [
            await ask(adapter, dm("bob", "/dashboard")),
            await ask(adapter, dm("alice", "/dashboard")),
        ]

    refused, alone = scenario(home, fake_llm, body)  # a router with no gateway around it
    assert refused == "That command needs an admin."
    assert alone.startswith("No dashboard is served for this home now")


def test_an_admins_help_has_one_admin_heading_over_every_admin_command(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    async def body(router: Router, adapter: FakeAdapter) -> tuple[str, list[str]]:
        PeopleDB(router.db).set_role(
            router.db.people.user_for_identity("fakechat", "alice"), "admin"
        )
        admin_only = [row.name for row in router.commands.table if row.admin_only]
        return await ask(adapter, dm("alice", "/help")), admin_only

    help_text, admin_only = scenario(home, fake_llm, body)
    assert len(admin_only) >= 2 and help_text.count("Admin") == 1, help_text
    heading = help_text.index("Admin")
    assert all(help_text.index(name + " ", heading) > heading for name in admin_only)


def test_presses_that_arrive_after_the_first_press_finished_are_still_one(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    """A person hammering a button: the first press's consolidation ends and answers,
    then nineteen more presses arrive (the platform delivered them late): one model call."""
    entries = [f"Fact {i}: the user keeps notes in the red folder" for i in range(3)]
    merged = {"entries": [{"text": "Fact 0, 1, 2: the user keeps notes in the red folder",
                           "sources": [1, 2, 3]}], "dropped": []}  # fmt: skip
    fake_llm.responder = lambda body: Reply(text=json.dumps(merged))

    async def body(router: Router, adapter: FakeAdapter) -> FakeAdapter:
        await ask(adapter, dm("alice", "/whoami"))
        seed(home, router.db.people.user_for_identity("fakechat", "alice"), *entries)
        first = await ask(adapter, dm("alice", "/memory consolidate", pressed=True))
        assert "3 → 1 entries" in first
        for _ in range(19):
            await adapter.deliver(dm("alice", "/memory consolidate", pressed=True))
        await ask(adapter, dm("alice", "/whoami"))  # a later message: the presses are done
        return adapter

    scenario(home, fake_llm, body)
    assert len(fake_llm.requests) == 1
