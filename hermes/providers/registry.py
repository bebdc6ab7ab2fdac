"""Where memory providers come from, in this order (the first of a name wins, so a
shipped provider cannot be shadowed by a plugin of the same name):

1. this package (`BUILT_IN`);
2. `$HERMES_HOME/plugins/<name>/__init__.py`, defining `Provider` (a class taking the
   provider's settings) or `create_provider(settings)`;
3. the entry-point group `hermes.memory_providers` (an installed package), each entry
   naming such a class or function.

A plugin that fails to import is reported by `discover` and skipped; it never stops the
gateway. `load(name, settings, home)` gives the host its factory (one instance per
person) or says clearly why it cannot.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes.providers.base import ConfigField, MemoryProvider
from hermes.providers.host import ProviderFactory

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "hermes.memory_providers"
PLUGINS_DIR = "plugins"
Maker = Callable[[dict[str, Any]], MemoryProvider]

# the providers shipped in this package, imported when looked for ("module:attribute")
BUILT_IN: dict[str, str] = {
    "evidence": "hermes.providers.evidence:EvidenceProvider",
    "holographic": "hermes.providers.holographic:HolographicProvider",
}


class ProviderError(Exception):
    """The configured provider cannot be used; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Found:
    name: str
    origin: str  # "built-in", the plugin folder, or "entry point <package>"
    make: Maker | None  # None: it failed to load (see error)
    error: str = ""


def discover(home: Path) -> dict[str, Found]:
    found: dict[str, Found] = {}
    for name, where in BUILT_IN.items():
        module, _, attribute = where.partition(":")
        found[name] = Found(name, "built-in", getattr(importlib.import_module(module), attribute))
    for item in _plugins(home) + _entry_points():
        if item.name in found:
            logger.warning(
                "memory provider %r from %s ignored: %s already provides it",
                item.name,
                item.origin,
                found[item.name].origin,
            )
            continue
        found[item.name] = item
    return found


def load(name: str, settings: dict[str, Any], home: Path) -> ProviderFactory:
    """The factory of provider `name`, configured with `settings`."""
    make = _found(name, home)
    return lambda: make(dict(settings))


def config_schema(name: str, home: Path) -> list[ConfigField]:
    """The settings provider `name` asks for (an unconfigured instance is asked)."""
    make = _found(name, home)
    return list(make({}).get_config_schema())


def _found(name: str, home: Path) -> Maker:
    known = discover(home)
    item = known.get(name)
    if item is None:
        names = ", ".join(sorted(known)) or "none are installed"
        raise ProviderError(
            f"memory.provider is {name!r}, which is not a known memory provider ({names}); "
            "see `hermes memory providers`"
        )
    if item.make is None:
        raise ProviderError(
            f"memory provider {name!r} ({item.origin}) failed to load: {item.error}"
        )
    return item.make


def _plugins(home: Path) -> list[Found]:
    root = home / PLUGINS_DIR
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(p for p in root.iterdir() if (p / "__init__.py").is_file()):
        origin = str(folder)
        try:
            module = _import(folder)
            found.append(Found(folder.name, origin, _maker(module)))
        except Exception as exc:
            logger.warning("memory provider plugin %s failed to load: %s", folder, exc)
            found.append(Found(folder.name, origin, None, f"{type(exc).__name__}: {exc}"))
    return found


def _import(folder: Path) -> Any:
    module_name = f"hermes_plugin_{folder.name}"
    spec = importlib.util.spec_from_file_location(
        module_name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _maker(module: Any) -> Maker:
    make = getattr(module, "create_provider", None) or getattr(module, "Provider", None)
    if make is None or not callable(make):
        raise ImportError("defines neither Provider nor create_provider")
    return make  # type: ignore[no-any-return]


def _entry_points() -> list[Found]:
    found = []
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {entry.value}"
        try:
            target = entry.load()
            if not callable(target):
                raise ImportError(f"{entry.value} is not a class or function")
            found.append(Found(entry.name, origin, target))
        except Exception as exc:
            logger.warning("memory provider %s failed to load: %s", origin, exc)
            found.append(Found(entry.name, origin, None, f"{type(exc).__name__}: {exc}"))
    return found


__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "Found",
    "ProviderError",
    "config_schema",
    "discover",
    "load",
]
