"""The terminal (`hermes chat`): always installed, never configured in config.yaml."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gateway.edge.platform_config import Credential, Platform, PlatformConfig

if TYPE_CHECKING:
    from gateway.edge.ports import MenuEntry, PlatformAdapter


def _credentials(_config: PlatformConfig) -> list[Credential]:
    return []


def _build(
    _config: PlatformConfig, _values: Mapping[str, str], _menu: Sequence[MenuEntry], _announce: bool
) -> PlatformAdapter:
    from adapters.cli.adapter import CliAdapter  # noqa: PLC0415

    return CliAdapter()


PLATFORM = Platform(name="cli", config=PlatformConfig, credentials=_credentials, build=_build)
