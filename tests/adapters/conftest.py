"""The fake platforms, one fresh server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.matrix_server import FakeMatrix
from tests.fakes.mattermost_server import FakeMattermost
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    server = FakeTelegram().start()
    yield server
    server.stop()


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    server = FakeSlack().start()
    yield server
    server.stop()


@pytest.fixture
def discord_fake() -> Iterator[FakeDiscord]:
    server = FakeDiscord().start()
    yield server
    server.stop()


@pytest.fixture
def mattermost() -> Iterator[FakeMattermost]:
    server = FakeMattermost().start()
    yield server
    server.stop()


@pytest.fixture
def matrix() -> Iterator[FakeMatrix]:
    server = FakeMatrix().start()
    yield server
    server.stop()
