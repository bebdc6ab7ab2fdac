"""The import rules of ../shared/DESIGN.md, checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLATFORM_SDKS = {"telegram", "discord", "slack_bolt", "slack_sdk"}


def imports(package: str) -> list[tuple[Path, str]]:
    found = []
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [(path, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.module))
    return found


def top(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


def test_hermes_imports_neither_gateway_nor_adapters() -> None:
    bad = [(p, m) for p, m in imports("hermes") if top(m) in {"gateway", "adapters"}]
    assert bad == []


@pytest.mark.parametrize("package", ["hermes", "gateway"])
def test_no_platform_sdk_outside_adapters(package: str) -> None:
    bad = [(p, m) for p, m in imports(package) if top(m) in PLATFORM_SDKS]
    assert bad == []


def test_sql_only_under_hermes_state() -> None:
    for package in ("hermes", "gateway", "adapters"):
        for path, module in imports(package):
            if top(module) in {"sqlmodel", "sqlalchemy", "sqlite3"}:
                assert path.is_relative_to(ROOT / "hermes" / "state"), path


def test_environment_is_read_only_by_the_config_module() -> None:
    for package in ("hermes", "gateway", "adapters"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if "os.environ" in text or "os.getenv" in text:
                assert path == ROOT / "gateway" / "config.py", path
