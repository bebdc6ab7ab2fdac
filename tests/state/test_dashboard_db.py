"""The dashboard's rows on both backends: a link works once and not after it expires,
logins end at logout, expiry or when their person loses the right, tokens are stored
only as hashes, the audit log keeps the newest first."""

from __future__ import annotations

from datetime import timedelta

from hermes.state import engine as eng
from hermes.state.dashboard import token_hash
from hermes.state.db import SessionDB
from hermes.state.models import DashboardLink, DashboardSession

ADA = "u_00000000000000a1"


def test_a_link_logs_in_once_and_only_while_it_lives(db: SessionDB) -> None:
    db.people.ensure_user(ADA, role="admin")
    token = db.dashboard.create_link(ADA, timedelta(minutes=10))
    assert db.dashboard.use_link(token) == ADA
    assert db.dashboard.use_link(token) is None
    stale = db.dashboard.create_link(ADA, timedelta(seconds=-1))
    assert db.dashboard.use_link(stale) is None
    assert db.dashboard.use_link("not a token") is None
    with eng.reading(db.engine) as session:
        assert session.get(DashboardLink, token) is None  # only the hash is stored
        assert session.get(DashboardLink, token_hash(token)) is not None


def test_logins_end_at_logout_expiry_and_for_everyone_of_a_person(db: SessionDB) -> None:
    db.people.ensure_user(ADA, role="admin")
    one = db.dashboard.start_login(ADA, timedelta(hours=1))
    two = db.dashboard.start_login(ADA, timedelta(hours=1))
    expired = db.dashboard.start_login(ADA, timedelta(seconds=-1))
    found = db.dashboard.login(one)
    assert found is not None and found.user_id == ADA
    assert db.dashboard.login(expired) is None
    db.dashboard.end_login(one)
    assert db.dashboard.login(one) is None and db.dashboard.login(two) is not None
    db.dashboard.end_all(ADA)
    assert db.dashboard.login(two) is None
    with eng.reading(db.engine) as session:
        assert session.get(DashboardSession, two) is None
    assert db.dashboard.prune(timedelta(0)) >= 1  # the expired one


def test_the_audit_log_keeps_the_newest_first_and_bounds_details(db: SessionDB) -> None:
    db.dashboard.audit(ADA, "login")
    db.dashboard.audit(ADA, "memory.add", "u_x", "y" * 5000)
    entries = db.dashboard.audit_log(10)
    assert [e.action for e in entries] == ["memory.add", "login"]
    assert len(entries[0].detail) == 500
