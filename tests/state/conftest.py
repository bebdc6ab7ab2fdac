from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes.identity import new_user_id
from hermes.state.db import SessionDB


@pytest.fixture
def db(home: Path, database_url: str | None) -> Iterator[SessionDB]:
    database = SessionDB.open(home, database_url)
    yield database
    database.close()


@pytest.fixture
def alice(db: SessionDB) -> str:
    return db.people.ensure_user(new_user_id(), role="owner", display_name="alice").id


@pytest.fixture
def bob(db: SessionDB) -> str:
    return db.people.ensure_user(new_user_id(), display_name="bob").id
