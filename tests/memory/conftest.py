from __future__ import annotations

from pathlib import Path

import pytest

from hermes.config import MemoryConfig
from hermes.identity import owner_user_id
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory
from hermes.state.db import SessionDB
from tests.memory.stores import backend_of


@pytest.fixture
def memory_backend(backend: str) -> str:
    """The memory stores' backend: files beside SQLite, the database on PostgreSQL."""
    return backend_of(backend)


@pytest.fixture
def memory(home: Path, db: SessionDB, memory_backend: str) -> UserMemory:
    return UserMemory(home, owner_user_id(home), MemoryConfig(backend=memory_backend), db)


@pytest.fixture
def tool(memory: UserMemory) -> MemoryTool:
    return MemoryTool(memory)
