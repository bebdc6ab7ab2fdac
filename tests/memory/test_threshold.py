"""The consolidation threshold has one home, `memory.consolidation.threshold`: the
prompt's guidance, every status display and the consolidation itself read it, and a
store's state is shown the same everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes.agent.sessions import Sessions
from hermes.config import ConsolidationConfig, MemoryConfig
from hermes.identity import owner_user_id
from hermes.memory.consolidation import over_threshold
from hermes.memory.service import MemoryService
from hermes.memory.store import Target
from hermes.state.db import SessionDB
from tests.memory.stores import seed

LIMIT = 1000


@pytest.fixture(autouse=True)
def backend_under_test(database_url: str | None, memory_backend: str) -> None:
    """Every test here on both backends (the stores' files with SQLite, rows with
    PostgreSQL): `service` opens the one under test."""
    global URL, BACKEND
    URL, BACKEND = database_url, memory_backend


URL: str | None = None
BACKEND = "files"


def service(home: Path, threshold: float) -> MemoryService:
    config = MemoryConfig(
        memory_char_limit=LIMIT,
        consolidation=ConsolidationConfig(threshold=threshold),
        backend=BACKEND,
    )
    return MemoryService(home, config, SessionDB.open(home, URL), auto_consolidate=False)


def fill(service: MemoryService, user_id: str, percent: int) -> None:
    memory = service.of(user_id)
    entry = "Fact: " + "x" * (percent * LIMIT // 100 - 6)
    seed(memory, Target.MEMORY, [entry])
    assert memory.store(Target.MEMORY).read().percent == percent


def test_the_prompt_names_the_configured_threshold(home: Path) -> None:
    memory = service(home, 0.6)
    prompt = Sessions(memory.db, home, memory).fresh_prompt(owner_user_id(home))
    assert "over 60 % full" in prompt and "80 %" not in prompt


def test_status_says_what_consolidation_will_do(home: Path) -> None:
    memory = service(home, 0.6)
    user = owner_user_id(home)
    fill(memory, user, 65)
    store = memory.status(user)[0]
    state = memory.of(user).store(Target.MEMORY).read()
    assert over_threshold(state, memory.config.consolidation)  # what the scheduler checks
    assert store.needs_consolidation and store.remark() == (
        "needs consolidation (over the 60% threshold)"
    )
    fill(memory, user, 55)
    assert memory.status(user)[0].remark() == ""


def test_a_small_store_never_shows_an_old_rejection(home: Path) -> None:
    """A rejected consolidation left its note in the record; once the store is under
    the threshold (the person removed entries), no display says it needs consolidating
    (and `memory consolidate` has nothing to do)."""
    memory = service(home, 0.8)
    user = owner_user_id(home)
    memory.db.people.ensure_user(user, role="owner")
    memory.db.memory_log.update_consolidation_state(
        user, "memory", needs_consolidation=True, last_error="rejected: dropped a fact"
    )
    fill(memory, user, 10)
    assert memory.status(user)[0].remark() == ""
    fill(memory, user, 85)
    assert memory.status(user)[0].remark() == "needs consolidation (rejected: dropped a fact)"
