"""Config sections the agent itself reads. The root model and loader live in gateway.config."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Section(BaseModel):
    """Base for every config section: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class MemoryConfig(Section):
    """The built-in MEMORY.md / USER.md stores."""

    memory_enabled: bool = True
    user_profile_enabled: bool = True
    memory_char_limit: int = Field(default=2200, ge=100, le=100_000)
    user_char_limit: int = Field(default=1375, ge=100, le=100_000)
