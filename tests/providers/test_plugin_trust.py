"""Plugin code runs inside Hermes, so it is trusted as ssh trusts keys: owned by the user
running Hermes, writable by no one else, no symlink; a built-in's name is never
imported; an import that exits or hangs is a failed plugin, never a failed command; and
loading one provider imports that plugin alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hermes.providers import registry
from tests.harness.cli import hermes

GOOD = (
    "from hermes.providers.base import BaseProvider\n"
    "class Provider(BaseProvider):\n    name = {name!r}\n"
)


def plugin(home: Path, name: str, body: str = "") -> Path:
    folder = home / "plugins" / name
    folder.mkdir(parents=True, mode=0o755)
    (home / "plugins").chmod(0o755)
    marker = home / f"ran-{name}"
    (folder / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n" + body + GOOD.format(name=name)
    )
    return marker


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (lambda f: f.chmod(0o777), "writable by others"),
        (lambda f: (f / "__init__.py").chmod(0o666), "writable by others"),
        (lambda f: os.chown(f / "__init__.py", 65534, 65534), "owned by uid 65534"),
        (lambda f: (f.parent).chmod(0o757), "writable by others"),
    ],
    ids=["world-writable folder", "world-writable file", "another user's file", "loose root"],
)
def test_plugin_code_not_owned_and_guarded_like_an_ssh_key_is_refused_unread(
    home: Path, spoil: object, why: str
) -> None:
    marker = plugin(home, "spy")
    spoil(home / "plugins" / "spy")  # type: ignore[operator]
    found = registry.discover(home)["spy"]
    assert found.make is None and why in found.error and not marker.exists()
    with pytest.raises(registry.ProviderError, match=why):
        registry.load("spy", {}, home)


def test_a_plugin_that_is_a_symlink_out_of_the_home_is_refused(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "spy"
    outside.mkdir(parents=True)
    (outside / "__init__.py").write_text(GOOD.format(name="spy"))
    (home / "plugins").mkdir(mode=0o755, parents=True)
    (home / "plugins" / "spy").symlink_to(outside)
    found = registry.discover(home)["spy"]
    assert found.make is None and "is a symlink" in found.error


def test_a_plugin_named_like_a_built_in_is_never_executed(home: Path) -> None:
    marker = plugin(home, "holographic")
    assert registry.discover(home)["holographic"].origin == "built-in"
    registry.load("holographic", {}, home)
    assert not marker.exists()


def test_loading_one_provider_imports_that_plugin_alone(home: Path) -> None:
    wanted, other = plugin(home, "deep"), plugin(home, "other")
    registry.load("deep", {}, home)
    assert wanted.exists() and not other.exists()


@pytest.mark.slow
def test_a_plugin_that_exits_or_hangs_never_takes_the_command_with_it(home: Path) -> None:
    plugin(home, "quitter", "import sys\nsys.exit(3)\n")
    plugin(home, "sleeper", "import time\ntime.sleep(3600)\n")
    plugin(home, "deep")
    shown = hermes("memory", "providers", "--json", home=home)
    assert shown.returncode == 0, shown.stderr
    listed = {row["name"]: row for row in json.loads(shown.stdout)}
    assert listed["deep"]["available"] is True
    assert "SystemExit" in str(listed["quitter"]) and "still importing" in str(listed["sleeper"])


def test_commands_that_never_touch_the_provider_never_run_its_plugin(home: Path) -> None:
    """A configured provider's plugin runs only when the provider is needed: `memory
    show`, `why` and `pending` read the built-in memory and its record; a write tells
    the provider, so it is made then."""
    assert hermes("memory", "add", "Runs Fedora 41", home=home).returncode == 0
    marker = plugin(home, "spy")
    (home / "config.yaml").write_text("memory:\n  provider: spy\n")
    for args in (("memory", "show"), ("memory", "why", "Fedora"), ("memory", "pending")):
        done = hermes(*args, home=home)
        assert done.returncode == 0, (args, done.stderr)
        assert not marker.exists(), f"hermes {' '.join(args)} imported the provider's plugin"
    assert hermes("memory", "add", "Prefers tea", home=home).returncode == 0
    assert marker.exists()
