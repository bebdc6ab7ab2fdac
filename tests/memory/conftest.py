from __future__ import annotations

from pathlib import Path

import pytest

from hermes.config import MemoryConfig
from hermes.identity import owner_user_id
from hermes.memory.tool import MemoryTool
from hermes.memory.user_memory import UserMemory


@pytest.fixture
def memory(home: Path) -> UserMemory:
    return UserMemory(home, owner_user_id(home), MemoryConfig())


@pytest.fixture
def tool(memory: UserMemory) -> MemoryTool:
    return MemoryTool(memory)
