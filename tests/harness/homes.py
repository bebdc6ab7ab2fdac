"""A home configured for a real `hermes gateway run` against the fakes: the fake model
and the Telegram fake (polling, person 42 allowed), other sections as a test adds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

TELEGRAM_ENV = {"TG_TOKEN": "123:ABC"}  # the token the section names


def telegram_home(home: Path, llm: FakeOpenAI, telegram: FakeTelegram, **sections: Any) -> None:
    home.mkdir(parents=True, exist_ok=True)
    config = {
        "llm": {"base_url": llm.base_url, "model": "m", "max_retries": 0},
        "platforms": {
            "telegram": {
                "enabled": True,
                "token_env": "TG_TOKEN",
                "base_url": telegram.base_url,
                "allowed_users": ["42"],
            }
        },
        "gateway": {"http": {"port": 0}, "streaming": False},
        **sections,
    }
    (home / "config.yaml").write_text(yaml.safe_dump(config))
