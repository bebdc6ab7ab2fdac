"""The `service` fixture: each memory service provider beside the fake of its service;
and every answer a Supermemory fake gives parsed by the SDK *with* validation."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.providers.services import SERVICES, Served, served


@pytest.fixture(params=sorted(SERVICES))
def service(request: pytest.FixtureRequest) -> Iterator[Served]:
    yield from served(request.param)


@pytest.fixture(autouse=True)
def strict_supermemory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Supermemory SDK builds its answers without validating them (Fern's
    `construct_type`), so a fake answering a shape the SDK does not describe would pass:
    here every answer is first parsed by the SDK's own validating parser (`parse_obj_as`)
    against the type the call declares, and a missing or mistyped field fails the test.
    (Mem0's SDK returns plain dicts: its fake is held to the published reference, see
    test_reference.py; Honcho's and Hindsight's SDKs validate every answer already.)"""
    import supermemory
    from supermemory.core.pydantic_utilities import parse_obj_as

    for found in pkgutil.walk_packages(supermemory.__path__, "supermemory."):
        if not found.name.endswith("raw_client"):
            continue
        module = importlib.import_module(found.name)
        lenient = getattr(module, "construct_type", None)
        if lenient is None:
            continue

        def validating(*, type_: Any, object_: Any, _lenient: Any = lenient, **more: Any) -> Any:
            parse_obj_as(type_, object_)  # raises pydantic's ValidationError on a bad shape
            return _lenient(type_=type_, object_=object_, **more)

        monkeypatch.setattr(module, "construct_type", validating)
