"""Tools are capabilities per person: the table of every tool group x every role x every
surface (a platform chat, the CLI chat, a scheduled prompt run in its owner's name),
through the real app and the real model client against the fake model server; the tool
list the model is offered is what is checked, and a call is checked again as it runs."""

from __future__ import annotations

import asyncio
import html
import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.app import build_app
from gateway.config import ConfigError, load_config, mcp_servers, parse_config
from gateway.reminders import ReminderRunner
from hermes.fence import fenced
from hermes.identity import owner_user_id
from hermes.places import Surface
from hermes.state.db import SessionDB
from hermes.tools import capabilities as caps
from hermes.tools.mcp import McpHub
from hermes.tools.schedule import ScheduleTool
from tests.apps import app_config
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.platform import FakeAdapter
from tests.fakes.web_site import ARTICLE_TEXT, WebSite
from tests.gateway.test_authority import _id, _login_as
from tests.gateway.test_cli_chat import configure
from tests.gateway.test_commands import ask
from tests.gateway.test_reminders import Clock
from tests.gateway.test_router import dm
from tests.harness.cli import hermes
from tests.harness.dashboard import serve
from tests.harness.wait import until

# each group for a different rank, and one named person beside a role
TABLE = {
    "memory": ["user"],
    "session_search": ["admin"],
    "schedule": ["owner", "fakechat:nina"],
    "provider": ["admin"],
    "web": ["admin", "fakechat:uma"],
    "message": ["admin", "fakechat:uma"],
    "message:team": ["user"],  # a chat the owner named: somewhere to send from a DM
}
PROVIDER_TOOLS = {"fact_store", "fact_feedback"}  # the holographic provider's
TOOLS = {
    "memory": {"memory"},
    "session_search": {"session_search"},
    "schedule": {"schedule"},
    "provider": PROVIDER_TOOLS,
    "web": {"web_search", "web_fetch"},
    "message": {"message"},
    "message:team": set(),  # a place of the message tool, no tool of its own
}
# chat name -> role set in the database (olga is linked to this home's owner)
PEOPLE = {"uma": "user", "nina": "user", "adam": "admin", "oscar": "owner", "olga": "user"}
EVERY = {"memory", "session_search", "schedule", "provider", "web", "message", "message:team"}
EXPECTED = {
    "uma": {"memory", "web", "message", "message:team"},
    "nina": {"memory", "schedule", "message:team"},
    "adam": {"memory", "session_search", "provider", "web", "message", "message:team"},
    "oscar": EVERY,
    "olga": EVERY,  # the home owner
}


def offered(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools") or ()}


def tools_of(groups: set[str]) -> set[str]:
    return set().union(*(TOOLS[g] for g in groups)) if groups else set()


def people(home: Path, db: SessionDB) -> dict[str, str]:
    ids = {}
    for name, role in PEOPLE.items():
        if name == "olga":
            ids[name] = owner_user_id(home)
            db.people.ensure_user(ids[name], role="owner")
            db.people.ensure_identity("fakechat", name, ids[name])
            continue
        ids[name] = db.people.user_for_identity("fakechat", name, name.title())
        db.people.set_role(ids[name], role)
    return ids


def run_app(home: Path, fake: FakeOpenAI, body: Any, **sections: Any) -> Any:
    async def go() -> Any:
        db = SessionDB.open(home)
        ids = people(home, db)
        config = app_config(
            fake,
            tools=TABLE,
            memory={"review_interval": 0, "provider": "holographic"},
            **{"message": {"chats": {"team": "fakechat:chat:team"}}, **sections},
        )
        app = build_app(home, config, db)
        adapter = FakeAdapter()
        app.router.attach(adapter)
        await adapter.start(app.router.handle)
        try:
            return await body(app, adapter, db, ids)
        finally:
            await app.router.stop()
            await app.close()
            db.close()

    return asyncio.run(go())


def test_a_chat_offers_each_person_the_tools_of_their_role_and_name(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    async def body(app: Any, adapter: FakeAdapter, db: SessionDB, ids: dict[str, str]) -> None:
        for name in PEOPLE:
            before = len(fake_llm.requests)
            await ask(adapter, dm(name, "hello"))
            [request] = fake_llm.requests[before:]
            assert offered(request) == tools_of(EXPECTED[name]), name
            # what /tools tells the person is the same table
            listing = await ask(adapter, dm(name, "/tools"))
            mine, _, theirs = listing.partition("Not for you here")
            for group in TABLE:
                assert (f"`{group}`" in mine) == (group in EXPECTED[name]), (name, group)
                assert (f"`{group}`" in theirs) == (group not in EXPECTED[name]), (name, group)

    run_app(home, fake_llm, body)


def test_a_scheduled_prompt_runs_with_its_owners_tools_never_more(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    async def body(app: Any, adapter: FakeAdapter, db: SessionDB, ids: dict[str, str]) -> None:
        clock = Clock()
        runner = ReminderRunner(db, app.router, app.agent, clock=clock)
        for name in PEOPLE:
            schedule = ScheduleTool(
                db, ids[name], ids[name], Surface("fakechat", "dm", name), f"k:{name}", clock=clock
            )
            added = await schedule.run(
                {
                    "action": "add",
                    "message": "the week's plan",
                    "when": "in 5 minutes",
                    "prompt": True,
                }
            )
            assert added["success"], added
            clock.advance(minutes=5)
            before = len(fake_llm.requests)
            assert await runner.fire(added["id"]) == "delivered"
            [request] = fake_llm.requests[before:]
            assert "scheduled task" in request["messages"][-1]["content"]
            assert offered(request) == tools_of(EXPECTED[name]), name

    run_app(home, fake_llm, body)


def test_a_call_is_checked_again_when_it_runs(home: Path, fake_llm: FakeOpenAI) -> None:
    """The role changes while the model thinks: the call it then makes is refused, and a
    tool never offered is unknown to the turn (the model named it anyway)."""

    def demote_then_call(request: dict[str, Any]) -> Reply:
        if request["messages"][-1]["role"] == "tool":
            return Reply(text="done")
        if "schedule" in offered(request):  # oscar's turn: he is demoted as it runs
            other = SessionDB.open(home)
            try:
                other.people.set_role(other.people.resolve("fakechat:oscar") or "", "user")
            finally:
                other.close()
        return Reply.tool_call("schedule", {"action": "list"})

    async def body(app: Any, adapter: FakeAdapter, db: SessionDB, ids: dict[str, str]) -> None:
        fake_llm.responder = demote_then_call
        for name in ("oscar", "uma"):
            before = len(fake_llm.requests)
            assert await ask(adapter, dm(name, "what's planned?")) == "done"
            result = json.loads(fake_llm.requests[before + 1]["messages"][-1]["content"])
            assert result["success"] is False, name
            expected = "may not use schedule" if name == "oscar" else "Unknown tool 'schedule'"
            assert expected in result["error"], result

    run_app(home, fake_llm, body)


def test_the_cli_chat_runs_as_the_home_owner_under_the_table(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    configure(home, fake_llm)
    with (home / "config.yaml").open("a") as config:
        config.write("tools:\n  schedule: []\n  session_search: [owner]\n  memory: [admin]\n")
    result = hermes("chat", "-q", "hello")
    assert result.returncode == 0, result.stderr
    [request] = fake_llm.requests
    # schedule: nobody; the web: the owner's by default; files: everyone's (saved here)
    assert offered(request) == {
        "memory",
        "session_search",
        "web_search",
        "web_fetch",
        "send_file",
    }


@pytest.mark.parametrize(
    ("entries", "holder", "allowed"),
    [
        (["user"], caps.Holder("u_1", "user"), True),
        (["admin"], caps.Holder("u_1", "user"), False),
        (["admin"], caps.Holder("u_1", "admin"), True),
        (["admin"], caps.Holder("u_1", "owner"), True),
        (["owner"], caps.Holder("u_1", "admin"), False),
        (["owner"], caps.Holder("u_1", "user", home_owner=True), True),
        ([], caps.Holder("u_1", "owner", home_owner=True), False),
        (["telegram:42"], caps.Holder("u_1", "user", identities=frozenset({"telegram:42"})), True),
        (["telegram:42"], caps.Holder("u_1", "user", identities=frozenset({"slack:42"})), False),
        (["u_1"], caps.Holder("u_1", "user"), True),
        (["u_2", "admin"], caps.Holder("u_1", "user"), False),
        (["nobody-knows"], caps.Holder("u_1", "owner"), False),  # no such role: nobody
    ],
)
def test_the_decision_by_rank_and_name(
    entries: list[str], holder: caps.Holder, allowed: bool
) -> None:
    assert (caps.may_use(holder, "schedule", {"schedule": entries}) is None) is allowed


def test_defaults_when_the_table_is_silent() -> None:
    user = caps.Holder("u_1", "user")
    for group in caps.BUILT_IN:
        assert (caps.may_use(user, group, {}) is None) == (group != "web")
    assert caps.may_use(caps.Holder("u_1", "owner"), "web", {}) is None
    assert caps.may_use(user, "mcp:notes", {}) is not None  # an MCP server: the owner's
    assert caps.may_use(caps.Holder("u_1", "admin"), "mcp:notes", {}) is not None
    assert caps.may_use(caps.Holder("u_1", "user", home_owner=True), "mcp:notes", {}) is None


@pytest.mark.parametrize(
    "text",
    [
        "tools:\n  websearch: [user]\n",  # no such group
        "tools:\n  mcp:: [user]\n",
        "tools:\n  mcp:Bad Name: [user]\n",
        "tools:\n  memory: [bob]\n",  # neither a role nor a person
        "tools:\n  memory: [telegram:]\n",
        "tools:\n  memory: user\n",  # not a list
    ],
)
def test_a_malformed_table_fails_at_start_naming_the_key(text: str) -> None:
    with pytest.raises(ConfigError, match="tools"):
        parse_config(text, "config.yaml")


def test_the_operator_sees_and_changes_the_table_on_the_cli(home: Path) -> None:
    assert hermes("init").returncode == 0
    assert hermes("tools", "deny", "schedule", "user").returncode == 0
    assert hermes("tools", "allow", "schedule", "admin", "owner", "Telegram:42").returncode == 0
    assert hermes("tools", "allow", "mcp:notes", "admin").returncode == 0
    listed = json.loads(hermes("tools", "list", "--json").stdout)
    rows = {row["group"]: (row["who"], row["default"]) for row in listed}
    assert rows["schedule"] == (["admin", "telegram:42"], False)
    assert rows["memory"] == (["user"], True)
    assert rows["mcp:notes"] == (["admin"], False)
    refused = hermes("tools", "deny", "memory", "admin")  # admin is not on [user]
    assert refused.returncode != 0 and "covers every higher one" in refused.stderr
    bad = hermes("tools", "allow", "websearch", "user")
    assert bad.returncode != 0 and "no tool group 'websearch'" in bad.stderr
    assert "Traceback" not in bad.stderr + refused.stderr
    assert hermes("tools", "reset", "schedule").returncode == 0
    config = (home / "config.yaml").read_text()
    assert "schedule" not in config and "mcp:notes" in config
    assert "# " in config  # the comments hermes init wrote are kept
    owner = owner_user_id(home)
    verdicts = json.loads(hermes("tools", "check", owner, "--json").stdout)
    assert {v["group"] for v in verdicts if v["allowed"]} == {
        "memory",
        "session_search",
        "schedule",
        "web",
        "message",
        "files",
        "mcp:notes",
    }


def test_a_member_asks_about_a_link_and_gets_its_text(home: Path, fake_llm: FakeOpenAI) -> None:
    """Through the gateway: the model reads the page with web_fetch (the site is on this
    machine: its network allowed by name) and answers from the fenced text."""
    site = WebSite().start()

    def model(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            page = json.loads(last["content"])
            inside = fenced(page["content"])
            assert inside is not None and page["title"] == "The night train returns"
            said = " ".join(inside[1].split())
            return Reply(text="It says the train is back." if ARTICLE_TEXT in said else "?")
        return Reply.tool_call("web_fetch", {"url": f"{site.root}/article"})

    async def body(app: Any, adapter: FakeAdapter, db: SessionDB, ids: dict[str, str]) -> str:
        fake_llm.responder = model
        return await ask(adapter, dm("uma", f"what does {site.root}/article say?"))

    try:
        answer = run_app(home, fake_llm, body, web={"allow_networks": ["loopback"]})
    finally:
        site.stop()
    assert answer == "It says the train is back."
    assert [path for path, _ in site.requests] == ["/article"]


def test_a_page_never_writes_memory_by_itself(home: Path, fake_llm: FakeOpenAI) -> None:
    """A turn that read a page: a note repeating the page is not saved on the model's
    word: the person is shown it with Save / Don't save buttons, only they can answer,
    once; the person's own fact is judged knowing the turn read the web."""
    site = WebSite().start()
    copied = "The night train from Vienna to Rome was brought back last spring"
    own = "Uma wants to take the night train to Rome in May"
    fake_llm.push(
        Reply.tool_call("web_fetch", {"url": f"{site.root}/article"}),
        Reply.tool_call("memory", {"action": "add", "target": "memory", "content": copied}),
        Reply.tool_call("memory", {"action": "add", "target": "memory", "content": own}),
        Reply(text="Noted."),
    )

    def memory() -> str:
        return next((home / "memories").glob("*/MEMORY.md")).read_text()

    async def body(app: Any, adapter: FakeAdapter, db: SessionDB, ids: dict[str, str]) -> None:
        await adapter.deliver(dm("uma", f"I want to go to Rome in May: {site.root}/article"))
        await adapter.wait_for(2)
        question, answer = adapter.sent[0].message, adapter.sent[1].message
        assert answer.text == "Noted."
        assert "Save this to memory?" in question.text and copied in question.text
        assert f"{site.root}/article" in question.text
        assert question.buttons is not None
        save, drop = question.buttons
        assert (save.label, drop.label) == ("Save", "Don't save")
        assert own in memory() and copied not in memory()
        # someone else presses it: nothing happens but a word to them
        press = {"pressed": True, "reply_to_id": "1"}
        refused = await ask(adapter, dm("nina", save.command, **press))
        assert "no question of mine" in refused and copied not in memory()
        edits = len(adapter.attempts)
        await adapter.deliver(dm("uma", save.command, **press))
        await until(lambda: len(adapter.attempts) > edits, "the question edited")
        shown = adapter.attempts[-1]
        assert shown.buttons == () and shown.text.endswith("Saved to memory.")
        assert copied in memory()
        again = await ask(adapter, dm("uma", drop.command))  # typed, after the yes
        assert again == "You already said yes to that."

    try:
        run_app(home, fake_llm, body, web={"allow_networks": ["loopback"]})
    finally:
        site.stop()
    held = json.loads(fake_llm.requests[2]["messages"][-1]["content"])
    assert not held["success"] and held["held"] and "button" in held["error"]
    saved = json.loads(fake_llm.requests[3]["messages"][-1]["content"])
    assert saved["success"], saved
    assert fake_llm.judge_requests[0] == own
    assert f"{site.root}/article" in fake_llm.judge_contexts[0]


@pytest.mark.parametrize("actor", ["admin", "owner", "home"])
def test_owners_change_the_table_on_the_dashboard_and_admins_only_see_it(
    home: Path, actor: str
) -> None:
    async def body() -> tuple[str, int, str, str]:
        async with serve(home) as served:
            served.db.people.ensure_user(_id(actor), role="owner" if actor == "home" else actor)
            browser = await _login_as(served, actor)
            try:
                _, page = await browser.get("/admin/tools")
                status, after = await browser.post(
                    "/admin/tools/set", {"group": "schedule", "who": "admin, telegram:42"}
                )
                _, bad = await browser.post("/admin/tools/set", {"group": "schedule", "who": "bob"})
                return page, status, after, bad
            finally:
                await browser.close()

    page, status, after, bad = asyncio.run(body())
    assert "<code>schedule</code>" in page and "Set reminders" in page
    config = parse_config((home / "config.yaml").read_text(), "config.yaml")
    if actor == "admin":
        assert "Only an owner changes" in page and 'action="/admin/tools/set"' not in page
        assert status == 403 and "only an owner can change who may use the tools" in after
        # the refusal keeps the pages' navigation and offers no login to the logged-in
        assert 'aria-label="Pages"' in after and "Log in" not in after
        assert config.tools == {}
        return
    assert status == 200 and "schedule: admins and owners, telegram:42." in after
    assert config.tools == {"schedule": ["admin", "telegram:42"]}
    assert "Not changed" in bad and "&#39;bob&#39; is neither a role" in bad


def test_a_change_on_the_dashboard_applies_to_the_next_turn(home: Path) -> None:
    """The running gateway's table is the page's: what an owner saves is what the next
    turn offers, with no restart."""
    table: dict[str, list[str]] = {}

    async def body() -> None:
        async with serve(home) as served:
            served.dashboard.parts.tools_table = table
            browser = await _login_as(served, "home")
            try:
                await browser.get("/admin/tools")
                await browser.post("/admin/tools/set", {"group": "memory", "who": "admin"})
                await browser.get("/admin/tools")
                await browser.post("/admin/tools/set", {"group": "web", "who": ""})
                await browser.get("/admin/tools")
                await browser.post("/admin/tools/set", {"group": "memory", "reset": "yes"})
            finally:
                await browser.close()

    asyncio.run(body())
    assert table == {"web": []}
    assert parse_config((home / "config.yaml").read_text(), "x").tools == {"web": []}


def test_the_owners_mcp_tools_answer_the_owner_only(home: Path, fake_llm: FakeOpenAI) -> None:
    """An MCP server in config.yaml: its tools are offered to the owner (the default for
    a server) and never to a member; the owner's call reaches the real server and its
    answer comes back fenced; the server's process ends with the gateway."""
    server = {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_server", "stdio", tag := secrets.token_hex(8)],
        "cwd": str(Path(__file__).resolve().parents[2]),
        "include": ["find_note"],
    }

    def model(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        if last["role"] == "tool":
            result = json.loads(last["content"])
            if not result["success"]:
                return Reply(text=result["error"])
            inside = fenced(result["content"])
            return Reply(text=inside[1] if inside else "?")
        if "mcp_notes_find_note" in offered(request):
            return Reply.tool_call("mcp_notes_find_note", {"query": "bike"})
        return Reply(text="no notes for you")

    async def body(app: Any, adapter: FakeAdapter, db: SessionDB, ids: dict[str, str]) -> list[str]:
        fake_llm.responder = model
        # the owner's first use of the server waits for their yes
        await ask(adapter, dm("olga", "what's my bike lock code?"))
        await until(  # the question goes first, the turn's reply after it
            lambda: any("once they press Allow" in t for t in adapter.texts()),
            "the turn's reply after its question",
        )
        asked = "\n".join(adapter.texts())
        at, question = next((i, s.message) for i, s in enumerate(adapter.sent) if s.message.buttons)
        assert "Allow the notes tools?" in question.text and question.buttons is not None
        allow = question.buttons[0]
        assert allow.label == "Allow"
        assert "4312" not in asked and "once they press Allow" in asked  # not called
        sent = len(adapter.sent)
        await adapter.deliver(dm("olga", allow.command, pressed=True, reply_to_id=str(at + 1)))
        # the question says so, and the turn goes on: the tool it waited for is called
        going_on = await until(
            lambda: [s.message.text for s in adapter.sent[sent:] if "4312" in s.message.text],
            "the turn never went on",
        )
        assert any(a.text.endswith("\n\nAllowed.") and a.buttons == () for a in adapter.attempts)
        said = [await ask(adapter, dm(n, "what's my bike lock code?")) for n in ("olga", "uma")]
        return [*going_on, *said, await ask(adapter, dm("olga", "/admin status"))]

    going_on, olga, uma, status = run_app(home, fake_llm, body, mcp={"servers": {"notes": server}})
    assert "MCP server notes: running (1 tools)" in status
    assert going_on == olga == "Note about bike: the bike lock code is 4312."
    allowed = [r for r in fake_llm.requests if "I pressed Allow" in str(r["messages"][-1])]
    assert allowed, "the turn went on from the person's message saying they allowed it"
    assert uma == "no notes for you"
    assert [offered(r) for r in fake_llm.requests if "mcp_notes_find_note" in offered(r)]
    running = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True, check=False)
    assert running.stdout.strip() == "", "the server's process ended with the gateway"


def test_the_tools_page_shows_each_mcp_servers_state_and_starts_one_on_request(
    home: Path,
) -> None:
    """Two servers in config.yaml, one that starts (the real SDK server) and one whose
    program does not exist: not started until asked; the owner's check starts the first
    and lists its tools, the second says why it failed; an admin sees, cannot start."""
    tag = secrets.token_hex(8)
    notes = {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_server", "stdio", tag],
        "cwd": str(Path(__file__).resolve().parents[2]),
        "include": ["find_note", "fail"],
    }
    servers = {"notes": notes, "broken": {"command": "/nonexistent/mcp-x"}}
    config_text = json.dumps({"gateway": {"http": {"port": 0}}, "mcp": {"servers": servers}})

    async def body() -> tuple[str, str, str, str, int]:
        async with serve(home) as served:
            (home / "config.yaml").write_text(config_text)
            config = load_config(home)
            served.dashboard.parts.config = config
            launches, problems = mcp_servers(config, {"PATH": "/usr/bin:/bin"})
            hub = McpHub(launches, problems)
            served.dashboard.parts.mcp = hub
            served.dashboard.parts.tools_table = {}
            try:
                owner = await _login_as(served, "home")
                _, before = await owner.get("/admin/tools")
                _, started = await owner.post("/admin/tools/mcp-check", {"server": "notes"})
                _, failed = await owner.post("/admin/tools/mcp-check", {"server": "broken"})
                await owner.close()
                served.db.people.ensure_user(_id("admin"), role="admin")
                admin = await _login_as(served, "admin")
                _, seen = await admin.get("/admin/tools")
                status, _ = await admin.post("/admin/tools/mcp-check", {"server": "notes"})
                await admin.close()
            finally:
                await hub.close()
            return before, started, failed, seen, status

    before, started, failed, seen, status = asyncio.run(body())
    rows = before.split('id="mcp-title"', 1)[1]
    assert "<code>notes</code>" in rows and "not started" in rows and ">owners<" in rows
    assert "MCP server notes: running (2 tools): find_note, fail." in html.unescape(started)
    assert "find_note, fail" in started.split('id="mcp-title"', 1)[1]
    assert "MCP server broken did not start: failed:" in html.unescape(failed)
    assert '<tr class="bad">' in failed.split('id="mcp-title"', 1)[1]
    assert "running (2 tools)" in seen and 'action="/admin/tools/mcp-check"' not in seen
    assert status == 403
