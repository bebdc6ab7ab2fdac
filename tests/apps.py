"""The application as tests build it: the composition root with the fake LLM's endpoint."""

from __future__ import annotations

from typing import Any

from gateway.config import HermesConfig
from tests.fakes.openai_server import FakeOpenAI


def app_config(fake_llm: FakeOpenAI, **sections: dict[str, Any]) -> HermesConfig:
    """A config pointing at `fake_llm`: no retries, no background review, everyone
    allowed; `sections` override whole keys of their section (`access={...}`)."""
    base: dict[str, dict[str, Any]] = {
        "llm": {"base_url": fake_llm.base_url, "model": "m", "max_retries": 0, "timeout": 10},
        "memory": {"review_interval": 0},
        "access": {"allow_all": True},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return HermesConfig.model_validate(base)
