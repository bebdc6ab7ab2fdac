"""Every memory service provider beside the local fake of its service: what the
service contract tests (test_services.py) run over."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from hermes.providers.hindsight import HindsightProvider
from hermes.providers.honcho import HonchoProvider
from hermes.providers.mem0 import Mem0Provider
from hermes.providers.openviking import OpenVikingProvider
from hermes.providers.retaindb import RetainDBProvider
from hermes.providers.service import ServiceProvider
from hermes.providers.supermemory import SupermemoryProvider
from tests.fakes.memory_services import (
    FakeHindsight,
    FakeHoncho,
    FakeMem0,
    FakeOpenViking,
    FakeRetainDB,
    FakeService,
    FakeSupermemory,
)


@dataclass
class Served:
    name: str
    fake: FakeService
    provider: type[ServiceProvider]
    settings: dict[str, Any]

    def make(self, **more: Any) -> ServiceProvider:
        return self.provider({**self.settings, **more})

    @property
    def factory(self) -> Callable[[], ServiceProvider]:
        return self.make

    def space(self, user_id: str) -> str:
        return self.make().space(user_id)

    def kept(self, user_id: str) -> list[str]:
        """Everything the service keeps for the person (in the fake, as stored)."""
        return self.fake.texts(self.space(user_id))


SERVICES: dict[str, tuple[type[FakeService], type[ServiceProvider]]] = {
    "hindsight": (FakeHindsight, HindsightProvider),
    "honcho": (FakeHoncho, HonchoProvider),
    "mem0": (FakeMem0, Mem0Provider),
    "openviking": (FakeOpenViking, OpenVikingProvider),
    "retaindb": (FakeRetainDB, RetainDBProvider),
    "supermemory": (FakeSupermemory, SupermemoryProvider),
}


def served(name: str) -> Iterator[Served]:
    fake_type, provider = SERVICES[name]
    fake = fake_type().start()
    try:
        settings = {"api_key": fake.api_key, "base_url": fake.base_url, "timeout_s": "3"}
        yield Served(name, fake, provider, settings)
    finally:
        fake.stop()
