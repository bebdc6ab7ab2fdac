"""The `service` fixture: each memory service provider beside the fake of its service."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.providers.services import SERVICES, Served, served


@pytest.fixture(params=sorted(SERVICES))
def service(request: pytest.FixtureRequest) -> Iterator[Served]:
    yield from served(request.param)
