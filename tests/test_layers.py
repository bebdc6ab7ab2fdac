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


def _in(path: Path, *parts: str) -> bool:
    return path.is_relative_to(ROOT.joinpath(*parts))


def test_the_gateway_runtime_imports_neither_adapters_nor_the_cli() -> None:
    bad = [
        (p, m)
        for p, m in imports("gateway")
        if not _in(p, "gateway", "cli") and (top(m) == "adapters" or m.startswith("gateway.cli"))
    ]
    assert bad == []


def test_the_cli_reaches_adapters_through_the_registry_only() -> None:
    bad = [
        (p, m) for p, m in imports("gateway") if _in(p, "gateway", "cli") and top(m) == "adapters"
    ]
    assert bad == []


ADAPTER_MAY_IMPORT = {
    "gateway.events",
    "gateway.ports",
    "gateway.chunking",
    "gateway.formatting",
    "gateway.http_server",
}


def test_adapters_import_only_the_gateways_edge() -> None:
    ours = {"gateway", "hermes", "adapters"}
    bad = [(p, m) for p, m in imports("adapters") if top(m) in ours and m not in ADAPTER_MAY_IMPORT]
    assert bad == []


@pytest.mark.parametrize(
    ("library", "homes"),
    [
        ("openai", [("hermes", "llm", "client.py")]),
        # running jobs in the scheduler; and, beside it, the calendar arithmetic of a
        # person's recurring reminder (CronTrigger's next time), which the schedule tool
        # needs in the agent's layer
        ("apscheduler", [("gateway", "scheduler.py"), ("hermes", "reminders.py")]),
        ("typer", [("gateway", "cli")]),
        ("rich", [("gateway", "cli")]),
    ],
)
def test_a_library_has_one_home(library: str, homes: list[tuple[str, ...]]) -> None:
    for package in ("hermes", "gateway", "adapters"):
        for path, module in imports(package):
            if top(module) == library:
                assert any(_in(path, *home) for home in homes), (path, module)


def test_apscheduler_in_the_agent_layer_is_its_calendar_only() -> None:
    used = {m for p, m in imports("hermes") if top(m) == "apscheduler"}
    assert used <= {"apscheduler.triggers.cron"}, used


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Our modules and the modules of ours each imports (TYPE_CHECKING ones included:
    a cycle in types is a cycle in the design)."""
    modules = {
        _module_name(path): path
        for package in ("hermes", "gateway", "adapters")
        for path in (ROOT / package).rglob("*.py")
    }
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def test_no_import_cycles() -> None:
    graph = _import_graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []
