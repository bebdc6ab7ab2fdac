"""Who may do what to whom, as one table: every action × every actor role × every target
role (and oneself, and this home's owner), checked against the one decision; then the
same table driven through the dashboard's forms, where an operator of each role meets a
person of each role (the answer the page gives must be the decision's)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from gateway.admission.authority import Action, Party, decide
from gateway.dashboard.auth import Credentials
from gateway.pipeline.router import Router
from hermes.state.people import PeopleDB
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.platform import FakeAdapter
from tests.gateway.test_commands import ask
from tests.gateway.test_router import dm, scenario
from tests.harness.dashboard import Browser, Served, serve

ACTORS = ["user", "admin", "owner", "home"]  # "home": this home's owner (the CLI's account)
TARGETS = ["self", "user", "admin", "owner", "home"]
OTHERS = ["user", "admin", "owner", "home"]

# the expected answers, written out (not derived from the rules they check): for each
# action, the (actor, target) pairs that are allowed
ON_USERS_FOR_ADMINS = {("admin", "user")} | {(a, t) for a in ("owner", "home") for t in OTHERS}
SELF = {(a, "self") for a in ACTORS}
ALLOWED: dict[Action, set[tuple[str, str]]] = {
    Action.LINK_CODE: SELF,
    Action.READ_MEMORY: SELF | ON_USERS_FOR_ADMINS,
    Action.EDIT_MEMORY: SELF | ON_USERS_FOR_ADMINS,
    Action.CANCEL_REMINDER: SELF | ON_USERS_FOR_ADMINS,
    Action.READ_CONVERSATIONS: SELF | {(a, t) for a in ("owner", "home") for t in OTHERS},
    Action.DELETE_CONVERSATIONS: SELF | {(a, t) for a in ("owner", "home") for t in OTHERS},
    Action.BLOCK: {("admin", "user")}
    | {(a, t) for a in ("owner", "home") for t in ("user", "admin")},
}
ADMINS = {"admin", "owner", "home"}
WITHOUT_TARGET = {
    Action.DECIDE_PAIRING: ADMINS,
    Action.USE_DASHBOARD: ADMINS,
    Action.CHANGE_TOOLS: {"owner", "home"},
    Action.CONTROL_JOBS: ADMINS,
    Action.EDIT_CONFIG: {"owner", "home"},
}


def role_change_allowed(actor: str, target: str, role: str) -> bool:
    if actor == "home" and target == "home":
        target = "self"
    if target == "home" or (target == "self" and actor == "home"):
        return role == "owner" and actor in ("owner", "home")
    if actor in ("owner", "home"):
        return True
    if actor == "admin":
        return role in ("user", "admin") and target in ("self", "user")
    return False


def party(name: str, actor: str | None = None) -> Party:
    """The actor (`actor` None), or a target: oneself, this home's owner (one person:
    oneself when the actor is them), or another person of that role."""
    if name == "self" or (name == "home" and actor == "home"):
        return party(actor or name)
    role = "owner" if name == "home" else name
    return Party(_id(name, target=actor is not None), role, home_owner=name == "home")


def _id(name: str, *, target: bool = False) -> str:
    """A person's id: actors and targets of the same role are two people."""
    digit = {"user": "1", "admin": "2", "owner": "3", "home": "4"}[name]
    if target and name != "home":
        digit = str(int(digit) + 4)
    return "u_" + digit * 16


def expected(action: Action, actor: str, target: str) -> bool:
    if actor == "home" and target == "home":
        target = "self"
    return (actor, target) in ALLOWED[action]


CASES = [
    (action, actor, target)
    for action in ALLOWED
    for actor, target in itertools.product(ACTORS, TARGETS)
]


@pytest.mark.parametrize(("action", "actor", "target"), CASES)
def test_the_decision_on_a_person(action: Action, actor: str, target: str) -> None:
    said = decide(party(actor), action, party(target, actor))
    assert (said is None) is expected(action, actor, target), said


@pytest.mark.parametrize(
    ("actor", "target", "role"),
    list(itertools.product(ACTORS, TARGETS, ["user", "admin", "owner"])),
)
def test_the_decision_on_a_role(actor: str, target: str, role: str) -> None:
    said = decide(party(actor), Action.SET_ROLE, party(target, actor), role=role)
    assert (said is None) is role_change_allowed(actor, target, role), said


@pytest.mark.parametrize(("action", "actor"), [(a, r) for a in WITHOUT_TARGET for r in ACTORS])
def test_the_decision_without_a_person(action: Action, actor: str) -> None:
    assert (decide(party(actor), action) is None) is (actor in WITHOUT_TARGET[action])


def test_a_refusal_says_why_in_words() -> None:
    said = decide(party("admin"), Action.LINK_CODE, party("home"))
    assert said == "a link code is only made by the person it links"
    said = decide(party("admin"), Action.SET_ROLE, party("admin", "admin"), role="owner")
    assert said == "only an owner can make someone an owner"


# -- the same table through the dashboard ----------------------------------------------

PASSWORDS = {"admin": "the admin's password", "owner": "the second owner's password"}


async def _login_as(served: Served, actor: str) -> Browser:
    browser = Browser(served.base)
    if actor == "home":
        await browser.login()  # the harness's owner password
        return browser
    Credentials.load(served.home).set_password(_id(actor), PASSWORDS[actor])
    await browser.login(PASSWORDS[actor])
    return browser


def _form(action: Action, target_id: str, role: str) -> tuple[str, dict[str, str]]:
    forms = {
        Action.SET_ROLE: ("/admin/people/role", {"user": target_id, "role": role}),
        Action.BLOCK: ("/admin/people/block", {"user": target_id, "blocked": "yes"}),
        Action.LINK_CODE: ("/admin/people/link-code", {"user": target_id}),
        Action.EDIT_MEMORY: (
            "/admin/memory/add",
            {"user": target_id, "target": "memory", "content": "Likes herons"},
        ),
    }
    return forms[action]


DASHBOARD_CASES = [
    (action, actor, target, role)
    for action in (Action.SET_ROLE, Action.BLOCK, Action.LINK_CODE, Action.EDIT_MEMORY)
    for actor in ("admin", "owner", "home")
    for target in TARGETS
    for role in (["user", "admin", "owner"] if action is Action.SET_ROLE else ["-"])
]


@pytest.mark.parametrize(("action", "actor", "target", "role"), DASHBOARD_CASES)
def test_the_dashboard_answers_as_the_decision(
    home: Path, action: Action, actor: str, target: str, role: str
) -> None:
    """Each form posted by an operator of each role about a person of each role: it acts
    exactly where the table allows (403 with the reason elsewhere)."""

    async def body() -> tuple[int, str]:
        async with serve(home) as served:
            for name, is_target in itertools.product(("user", "admin", "owner"), (False, True)):
                served.db.people.ensure_user(_id(name, target=is_target), role=name)
            # the harness's owner is this home's owner: the "home" party
            if target == "self" or (target == "home" and actor == "home"):
                target_id = served.owner if actor == "home" else _id(actor)
            else:
                target_id = served.owner if target == "home" else _id(target, target=True)
            browser = await _login_as(served, actor)
            try:
                await browser.get("/admin/people")
                path, form = _form(action, target_id, role)
                status, page = await browser.post(path, form)
                return status, page
            finally:
                await browser.close()

    status, page = asyncio.run(body())
    if action is Action.SET_ROLE:
        allowed = role_change_allowed(actor, target, role)
    else:
        allowed = expected(action, actor, target)
    if allowed:
        assert status == 200 and "Not allowed" not in page, page[-600:]
    else:
        assert status == 403 and "Not allowed" in page, (status, page[-600:])


# -- the same table through the chat's /admin commands ----------------------------------

CHAT_ACTIONS = {Action.BLOCK: "/admin block", Action.READ_MEMORY: "/admin memory"}
CHAT_CASES = [
    (action, actor, target)
    for action in CHAT_ACTIONS
    for actor in ("user", "admin", "owner")  # this home's owner is the CLI's, not a chat's
    for target in ("self", "user", "admin", "owner")
]


@pytest.mark.parametrize(("action", "actor", "target"), CHAT_CASES)
def test_the_chat_answers_as_the_decision(
    home: Path, fake_llm: FakeOpenAI, action: Action, actor: str, target: str
) -> None:
    names = {"user": ("ursula", "uwe"), "admin": ("ada", "abe"), "owner": ("olga", "otto")}

    async def body(router: Router, adapter: FakeAdapter) -> str:
        people = PeopleDB(router.db)
        for role, pair in names.items():
            for name in pair:
                people.set_role(router.db.people.user_for_identity("fakechat", name), role)
        router.people.changed()
        me = names[actor][0]
        them = me if target == "self" else names[target][1]
        reply = await ask(adapter, dm(me, f"{CHAT_ACTIONS[action]} fakechat:{them}"))
        return reply

    reply = scenario(home, fake_llm, body)
    allowed = expected(action, actor, target)
    if actor == "user":
        assert "needs an admin" in reply, reply  # the command table's guard
    elif allowed:  # done
        assert reply.startswith(("Blocked", "Memory of")), reply
    else:
        assert reply.startswith("Not allowed"), reply


# -- the same table through the CLI (which acts as this home's owner) --------------------


@pytest.mark.parametrize(
    ("action", "target"),
    [(a, t) for a in (Action.BLOCK, Action.SET_ROLE) for t in ("user", "admin", "owner", "home")],
)
def test_the_cli_answers_as_the_decision(home: Path, action: Action, target: str) -> None:
    from hermes.identity import owner_user_id
    from hermes.state.db import SessionDB
    from tests.harness.cli import hermes

    assert hermes("memory", "add", "Prefers tea").returncode == 0  # a home, its owner
    db = SessionDB.open(home)
    try:
        for name in ("user", "admin", "owner"):
            db.people.ensure_user(_id(name, target=True), role=name)
    finally:
        db.close()
    who = owner_user_id(home) if target == "home" else _id(target, target=True)
    args = ("block", who) if action is Action.BLOCK else ("role", who, "user")
    done = hermes("users", *args)
    allowed = (
        expected(action, "home", target)
        if action is Action.BLOCK
        else role_change_allowed("home", target, "user")
    )
    assert (done.returncode == 0) is allowed, done.stdout + done.stderr
    if not allowed:
        assert done.returncode == 1 and "Traceback" not in done.stderr


def test_memory_provenance_quotes_follow_the_conversation_rule(home: Path) -> None:
    """What a person said reaches an admin neither as a conversation nor as the quote
    under a memory entry it caused; the owner sees both (one privacy rule)."""
    from hermes.state.conversations import NewMessage

    said = "My sister Mina lives in Busan, keep that in mind"

    async def body() -> tuple[str, str]:
        async with serve(home, "memory:\n  scan:\n    judge: 'off'\n") as served:
            user = _id("user", target=True)
            served.db.people.ensure_user(user, role="user", display_name="Uma")
            served.db.people.ensure_user(_id("admin"), role="admin", display_name="Ada")
            chat = served.db.conversations.start_session(user, "telegram", "telegram:dm:9")
            (message,) = served.db.conversations.add_messages(chat.id, [NewMessage("user", said)])
            outcome = await served.dashboard.memory.apply(
                user,
                {"action": "add", "target": "user", "content": "Sister Mina lives in Busan"},
                actor="agent", session_id=chat.id, message_id=message,
            )  # fmt: skip
            assert outcome.result.get("success"), outcome.result
            pages = []
            for actor in ("admin", "home"):
                browser = await _login_as(served, actor)
                try:
                    _, page = await browser.get(f"/admin/memory?user={user}")
                    pages.append(page)
                finally:
                    await browser.close()
            return pages[0], pages[1]

    admin_page, owner_page = asyncio.run(body())
    assert "Sister Mina lives in Busan" in admin_page  # the memory itself: theirs to manage
    assert "keep that in mind" not in admin_page and "for an owner to read" in admin_page
    assert "keep that in mind" in owner_page
