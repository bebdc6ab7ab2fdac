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

Plugin code runs inside Hermes, so it is trusted the way ssh trusts its keys: the
plugins folder, the plugin's folder and every file in it must be owned by the user
running Hermes (or root), writable by no one else, and no symlink; otherwise it is
refused unread. A name a built-in provider has is never imported; loading one provider
imports that plugin alone (a listing imports them all); an import that raises, calls
sys.exit or does not finish within PLUGIN_IMPORT_S is a failed plugin, never a failed
command.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes.providers.base import ConfigField, MemoryProvider, ProviderFactory

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "hermes.memory_providers"
PLUGINS_DIR = "plugins"
PLUGIN_IMPORT_S = 10.0  # a plugin still importing after this is given up
Maker = Callable[[dict[str, Any]], MemoryProvider]

# the providers shipped in this package, imported when looked for ("module:attribute")
BUILT_IN: dict[str, str] = {
    "evidence": "hermes.providers.evidence:EvidenceProvider",
    "hindsight": "hermes.providers.hindsight:HindsightProvider",
    "holographic": "hermes.providers.holographic:HolographicProvider",
    "honcho": "hermes.providers.honcho:HonchoProvider",
    "mem0": "hermes.providers.mem0:Mem0Provider",
    "openviking": "hermes.providers.openviking:OpenVikingProvider",
    "retaindb": "hermes.providers.retaindb:RetainDBProvider",
    "supermemory": "hermes.providers.supermemory:SupermemoryProvider",
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
    for item in _plugins(home, skip=frozenset(BUILT_IN)) + _entry_points():
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


def names(home: Path) -> list[str]:
    """Every provider name there is, without importing any (shell completion): the
    built-in ones, the plugin folders that would be trusted, the entry points."""
    found = set(BUILT_IN)
    root = home / PLUGINS_DIR
    if root.is_dir() and not _untrusted(root):
        found.update(
            folder.name
            for folder in root.iterdir()
            if (folder / "__init__.py").is_file() and not _untrusted(folder)
        )
    found.update(entry.name for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    return sorted(found)


def load(name: str, settings: dict[str, Any], home: Path) -> ProviderFactory:
    """The factory of provider `name`, configured with `settings`."""
    make = _found(name, home)
    return lambda: make(dict(settings))


def config_schema(name: str, home: Path) -> list[ConfigField]:
    """The settings provider `name` asks for (an unconfigured instance is asked)."""
    make = _found(name, home)
    return list(make({}).get_config_schema())


def _found(name: str, home: Path) -> Maker:
    if name in BUILT_IN:
        module, _, attribute = BUILT_IN[name].partition(":")
        make: Maker = getattr(importlib.import_module(module), attribute)
        return make
    plugins = [p for p in _plugins(home, only=name) if p.name == name]
    known = {p.name: p for p in plugins} if plugins else discover(home)
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


def _plugins(
    home: Path, *, only: str | None = None, skip: frozenset[str] = frozenset()
) -> list[Found]:
    root = home / PLUGINS_DIR
    if not root.is_dir() or (only is not None and not (root / only).is_dir()):
        return []
    refused = _untrusted(root)
    folders = [root / only] if only is not None else sorted(root.iterdir())
    found = []
    for folder in folders:
        if folder.name in skip or not (folder / "__init__.py").is_file():
            continue
        origin = str(folder)
        why = refused or _untrusted_tree(folder)
        if why:
            logger.warning("memory provider plugin %s refused: %s", folder, why)
            found.append(Found(folder.name, origin, None, f"refused: {why}"))
            continue
        try:
            found.append(Found(folder.name, origin, _maker(_import_bounded(folder))))
        except BaseException as exc:  # SystemExit too: a plugin never ends the command
            if isinstance(exc, KeyboardInterrupt):
                raise
            logger.warning("memory provider plugin %s failed to load: %s", folder, exc)
            found.append(Found(folder.name, origin, None, f"{type(exc).__name__}: {exc}"))
    return found


def _untrusted(path: Path) -> str:
    """Why `path` may not be trusted as code ('' if it may): a symlink, not owned by
    this user (or root), or writable by group or others."""
    try:
        info = path.lstat()
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symlink"
    if info.st_uid not in (os.geteuid(), 0):
        return f"{path} is owned by uid {info.st_uid}, not by the user running Hermes"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by others (chmod go-w)"
    return ""


def _untrusted_tree(folder: Path) -> str:
    for path in [folder, *sorted(folder.rglob("*"))[:10_000]]:
        if why := _untrusted(path):
            return why
    return ""


def _import_bounded(folder: Path) -> Any:
    """`_import`, in a daemon thread given PLUGIN_IMPORT_S (a hung import is left
    behind; it does not keep the process alive)."""
    done: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(_import(folder))
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, name=f"plugin-{folder.name}", daemon=True)
    thread.start()
    thread.join(PLUGIN_IMPORT_S)
    if failed:
        raise failed[0]
    if not done:
        raise TimeoutError(f"still importing after {PLUGIN_IMPORT_S:g} s")
    return done[0]


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
    "PLUGIN_IMPORT_S",
    "Found",
    "ProviderError",
    "config_schema",
    "discover",
    "load",
    "names",
]
