"""`hermes users`, `hermes pairing` and `hermes memory status --all` as real processes."""

from __future__ import annotations

from pathlib import Path

from hermes.config import MemoryConfig
from hermes.identity import owner_user_id
from hermes.memory import entries as fmt
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from tests.harness.cli import hermes


def people(home: Path) -> tuple[str, str]:
    db = SessionDB.open(home)
    ann = db.people.user_for_identity("telegram", "1", "Ann")
    bob = db.people.user_for_identity("slack", "U2", "Bob")
    db.close()
    for user, size in ((ann, 200), (bob, 2000)):
        memory = UserMemory(home, user, MemoryConfig())
        memory.folder.mkdir(parents=True, exist_ok=True)
        (memory.folder / "MEMORY.md").write_text(fmt.serialize(["x" * size]))
    return ann, bob


def test_list_show_role_block_and_unlink(home: Path) -> None:
    ann, _ = people(home)
    listed = hermes("users", "list", home=home)
    assert listed.returncode == 0 and ann in listed.stdout and "telegram:1" in listed.stdout
    assert owner_user_id(home) in listed.stdout and "cli:local" in listed.stdout
    shown = hermes("users", "show", "telegram:1", home=home)
    assert shown.returncode == 0 and "Ann" in shown.stdout
    assert hermes("users", "show", "telegram:999", home=home).returncode == 1
    assert hermes("users", "role", "telegram:1", "admin", home=home).returncode == 0
    assert hermes("users", "role", "telegram:1", "superuser", home=home).returncode == 2
    assert hermes("users", "block", "telegram:1", home=home).returncode == 0
    assert hermes("users", "block", owner_user_id(home), home=home).returncode == 1
    db = SessionDB.open(home)
    user = db.people.get_user(ann)
    assert user is not None and (user.role, user.status) == ("admin", "blocked")
    db.close()
    assert hermes("users", "block", ann, "--unblock", home=home).returncode == 0
    only = hermes("users", "unlink", ann, "telegram", home=home)
    assert only.returncode == 1 and "only identity" in only.stderr


def test_memory_status_all_is_sorted_by_fill(home: Path) -> None:
    ann, bob = people(home)
    table = hermes("memory", "status", "--all", home=home)
    assert table.returncode == 0, table.stderr
    assert table.stdout.index(bob) < table.stdout.index(ann)  # Bob's store is fuller
    assert "2,000/2,200 (90%)" in table.stdout


def test_pairing_list_approve_and_deny(home: Path) -> None:
    db = SessionDB.open(home)
    first = db.access.request_pairing("telegram", "77", "Stranger").request
    second = db.access.request_pairing("slack", "U9", "Other").request
    db.close()
    assert first is not None and second is not None
    listed = hermes("pairing", "list", home=home)
    assert first.code in listed.stdout and second.code in listed.stdout
    assert hermes("pairing", "approve", "NOTACODE", home=home).returncode == 1
    approved = hermes("pairing", "approve", first.code.lower(), home=home)
    # the words of the chat's /admin approve (gateway.admission.people.People.decide_pairing)
    assert approved.returncode == 0 and "Approved: telegram user Stranger (77)." in approved.stdout
    denied = hermes("pairing", "deny", second.code, home=home)
    assert denied.returncode == 0 and "Denied: slack user Other (U9)." in denied.stdout
    assert "No pending requests" in hermes("pairing", "list", home=home).stdout
    db = SessionDB.open(home)
    assert db.access.rules() == {("telegram", "user", "77"): "allow"}
    db.close()


def test_an_account_that_never_wrote_can_be_given_a_role_and_memory_by_platform_id(
    home: Path,
) -> None:
    from gateway.admission.people import People, Verdict
    from gateway.app import build_memory
    from gateway.config import HermesConfig
    from gateway.edge.events import ChatRef, ChatType, MessageEvent, UserRef

    made = hermes("users", "role", "telegram:5550001", "admin", home=home)
    assert made.returncode == 0, made.stderr
    user_id = made.stdout.split()[1]
    shown = hermes("users", "show", "telegram:5550001", home=home)
    assert user_id in shown.stdout and "admin" in shown.stdout
    added = hermes("memory", "add", "--user", "telegram:5550001", "Runs the Busan office")
    assert added.returncode == 0, added.stderr
    listed = hermes("memory", "show", "--user", user_id, home=home)
    assert "Runs the Busan office" in listed.stdout
    # when they first write, they are that user, with that role: let in (no allowlist)
    db = SessionDB.open(home)
    event = MessageEvent(
        platform="telegram",
        event_id="1",
        message_id="1",
        chat=ChatRef("5550001", ChatType.DM),
        user=UserRef("5550001", "New Admin"),
        text="hello",
        sent_at=0.0,
    )
    config = HermesConfig()
    person = People(config, db, build_memory(home, config, db, None)).resolve(event)
    named = db.people.get_user(user_id)
    db.close()
    assert person.user_id == user_id and person.verdict is Verdict.ALLOW
    # and named as their platform names them (the dashboard shows names, not ids)
    assert named is not None and named.display_name == "New Admin"

    unknown = hermes("memory", "show", "--user", "telegram:404", home=home)
    assert unknown.returncode == 1 and str(home) in unknown.stderr
    typo = hermes("users", "role", "telegrm:1", "admin", home=home)
    assert typo.returncode == 2 and "unknown platform 'telegrm'" in typo.stderr
    assert "Traceback" not in unknown.stderr + typo.stderr
