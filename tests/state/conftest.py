from __future__ import annotations

import pytest

from hermes.identity import new_user_id
from hermes.state.db import SessionDB


@pytest.fixture
def alice(db: SessionDB) -> str:
    return db.people.ensure_user(new_user_id(), role="owner", display_name="alice").id


@pytest.fixture
def bob(db: SessionDB) -> str:
    return db.people.ensure_user(new_user_id(), display_name="bob").id
