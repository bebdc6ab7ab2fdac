"""Every third-party module the product imports is declared, where an install that uses it
will have it; every declared range is bounded; and requirements/constraints.txt (the
versions every install takes) pins every one of them inside its range.

Where an import may come from (a module imported at the top of a file runs whenever the
file is imported; one imported inside a function runs when that feature is used):
- a platform's package `adapters/<name>/` and a provider's module `hermes/providers/<name>.py`
  are imported only when that platform or provider is configured: the base dependencies
  and the extra of the same name;
- any other module at its top: the base dependencies only (the chat, `make chat`, imports it);
- inside a function anywhere: the base or any extra (a feature's lazy import; the registry and
  `gateway.extras` turn its absence into one message naming the extra).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"
OURS = {"hermes", "gateway", "adapters", "tests", "bench"}
# calendar-versioned data: every release is newer data in the same format
UNBOUNDED = {"tzdata"}


def requirements(group: str | None) -> list[Requirement]:
    raw = PROJECT["dependencies"] if group is None else PROJECT["optional-dependencies"][group]
    return [Requirement(text) for text in raw]


def declared(group: str | None) -> set[str]:
    return {canonicalize_name(r.name) for r in requirements(group)} - {"hermes-gateway"}


@dataclass(frozen=True)
class Import:
    path: str
    module: str
    top_level: bool  # at the module's top (runs on import), not inside a function


def imports() -> Iterator[Import]:
    for folder in ("gateway", "hermes", "adapters"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            yield from _imports(tree, str(path.relative_to(ROOT)), top_level=True)


def _imports(node: ast.AST, path: str, *, top_level: bool) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        inner = top_level and not isinstance(
            child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield Import(path, alias.name.split(".")[0], top_level)
        elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
            yield Import(path, child.module.split(".")[0], top_level)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            continue  # typing only: never runs
        else:
            yield from _imports(child, path, top_level=inner)


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def feature_of(path: str) -> str | None:
    """The extra whose feature this file is (its own package or module), if any."""
    parts = Path(path).parts
    extras = PROJECT["optional-dependencies"]
    if parts[0] == "adapters" and len(parts) > 2 and parts[1] in extras:
        return parts[1]
    if parts[:2] == ("hermes", "providers") and Path(path).stem in extras:
        return Path(path).stem
    return None


@functools.cache
def _owners() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


def distributions(module: str) -> set[str]:
    owners = _owners().get(module, [])
    return {canonicalize_name(name) for name in owners}


def third_party() -> list[Import]:
    return [
        found
        for found in imports()
        if found.module not in sys.stdlib_module_names
        and found.module not in OURS
        and found.module != "__future__"
    ]


def test_every_import_is_declared_where_its_install_has_it() -> None:
    base = declared(None)
    any_extra = set().union(*(declared(g) for g in PROJECT["optional-dependencies"]))
    wrong: list[str] = []
    for found in third_party():
        owners = distributions(found.module)
        assert owners, f"{found.path}: {found.module} is installed by no distribution here"
        feature = feature_of(found.path)
        if feature is not None:
            allowed, where = base | declared(feature), f"the base or [{feature}]"
        elif found.top_level:
            allowed, where = base, "the base dependencies"
        else:
            allowed, where = base | any_extra, "the base or an extra"
        if not owners & allowed:
            wrong.append(
                f"{found.path} imports {found.module} ({'/'.join(owners)}): not in {where}"
            )
    assert not wrong, "\n".join(wrong)


def test_the_rule_bites() -> None:
    """A top-level import of an extra's package outside its feature, and one of a package
    nobody declares, are both found (the check above is not vacuous)."""
    tree = ast.parse("import psycopg\ndef f():\n    import telegram\n")
    found = list(_imports(tree, "hermes/state/x.py", top_level=True))
    assert found == [
        Import("hermes/state/x.py", "psycopg", True),
        Import("hermes/state/x.py", "telegram", False),
    ]
    assert "psycopg" not in declared(None) and canonicalize_name("psycopg") in declared("postgres")
    assert feature_of("adapters/slack/adapter.py") == "slack"
    assert feature_of("hermes/providers/mem0.py") == "mem0"
    assert feature_of("hermes/providers/service.py") is None


LOCKED = [None, *sorted(set(PROJECT["optional-dependencies"]) - {"bench-embeddings"})]


@pytest.mark.parametrize("group", LOCKED)
def test_every_range_admits_only_majors_the_suite_runs_with(group: str | None) -> None:
    """An upper bound on every dependency (a new major is taken by `make lock` and a green
    suite, never by a user's install) and a lower one; the benchmarks' extra is installed
    by hand beside a CPU torch (docs: Benchmarks) and is not locked."""
    for requirement in requirements(group):
        name = canonicalize_name(requirement.name)
        if name == "hermes-gateway" or name in UNBOUNDED:
            continue
        operators = {spec.operator for spec in requirement.specifier}
        assert "<" in operators and (">=" in operators), f"{requirement}: bound it both ways"


def pinned() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in CONSTRAINTS.read_text().splitlines():
        line = raw.split("#")[0].strip()
        if "==" in line:
            name, _, rest = line.partition("==")
            version = rest.split(";")[0].strip()
            pins.setdefault(canonicalize_name(name), version)
    return pins


@pytest.mark.parametrize("group", LOCKED)
def test_the_constraints_pin_every_declared_dependency_inside_its_range(group: str | None) -> None:
    pins = pinned()
    for requirement in requirements(group):
        name = canonicalize_name(requirement.name)
        if name == "hermes-gateway":
            continue
        assert name in pins, f"{name} is not in {CONSTRAINTS.name}: run make lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} is outside {requirement.specifier}: run make lock"
        )
