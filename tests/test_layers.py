"""The import rules of ../shared/DESIGN.md, checked on the source."""

from __future__ import annotations

import ast
import re
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


EDGE = "gateway.edge"  # what platform packages may see of the gateway


def test_adapters_import_only_the_gateways_edge_and_their_own_package() -> None:
    ours = {"gateway", "hermes", "adapters"}
    bad = []
    for path, module in imports("adapters"):
        own = "adapters." + path.relative_to(ROOT / "adapters").parts[0]
        mine = module == own or module.startswith(own + ".")
        edge = module.startswith(EDGE + ".")
        if top(module) in ours and not edge and not mine:
            bad.append((path, module))
    assert bad == []


def _platform_names() -> list[str]:
    from gateway.edge.platforms import PACKAGES

    return list(PACKAGES)


def _words(identifier: str) -> set[str]:
    """'TelegramConfig' -> {'telegram', 'config'}; 'slack_mode' -> {'slack', 'mode'}."""
    return {w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", identifier)}


def _mentions(path: Path, name: str) -> list[str]:
    """Where the code of `path` names platform `name`: a string that is the name or
    starts a dotted or config key with it, or an identifier with it as a word (not for
    names that are words of code too: the terminal's "cli", which the operator's CLI
    shares, and "matrix", a search's vectors). Docstrings, comments and prose in
    messages do not count."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            text = node.value.lower()
            if text == name or text.startswith((f"{name}.", f"{name}:", f"{name}_")):
                found.append(f"{path.name}:{node.lineno} {node.value!r}")
        elif name in ("cli", "matrix"):
            continue
        elif isinstance(node, ast.Name) and name in _words(node.id):
            found.append(f"{path.name}:{node.lineno} {node.id}")
        elif isinstance(node, ast.Attribute) and name in _words(node.attr):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.arg) and name in _words(node.arg):
            found.append(f"{path.name}:{node.lineno} {node.arg}")
    return found


@pytest.mark.parametrize("name", _platform_names())
def test_a_platform_is_one_package_and_its_registry_line(name: str) -> None:
    """Everything the gateway knows about a platform is in `adapters/<name>/` (its
    config model, credentials, rendering, doctor check, init questions, log shapes, SDK
    code); outside it, only gateway/edge/platforms.py names it. The files it owns are listed
    here, so a fifth platform is a folder, its registry line and its extra."""
    package = ROOT / "adapters" / name
    owned = sorted(str(p.relative_to(ROOT)) for p in package.rglob("*.py"))
    assert f"adapters/{name}/__init__.py" in owned and f"adapters/{name}/adapter.py" in owned
    registry_line = ROOT / "gateway" / "edge" / "platforms.py"
    elsewhere = [
        mention
        for folder in ("gateway", "hermes", "adapters")
        for path in (ROOT / folder).rglob("*.py")
        if path != registry_line and not path.is_relative_to(package)
        for mention in _mentions(path, name)
    ]
    assert elsewhere == [], f"{name} is named outside adapters/{name}/: {elsewhere}"


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


# The gateway's rooms, lowest first: a module imports only from its own room or a lower
# one. The foundation (config and the environment, logging, the job store) is below
# every room; the process (the composition root, the gateway process and what its
# scheduler runs) sits above the rooms it assembles; the operator's tools above it.
ROOMS = [
    ("edge",),
    (
        "config.py",
        "logs.py",
        "loopwatch.py",
        "scheduler.py",
        "status_file.py",
        "instances.py",
        "config_edit.py",
    ),
    ("admission",),
    ("commands",),
    ("pipeline",),
    ("dashboard",),
    (
        "app.py",
        "catch_up.py",
        "runtime.py",
        "jobs.py",
        "reminders.py",
        "registry.py",
        "instance.py",
        "cluster.py",
        "uptime.py",
    ),
    ("ops",),
    ("cli",),
]


def _room_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "gateway" or len(parts) < 2:
        return None
    name = parts[1]
    for at, room in enumerate(ROOMS):
        if name in room or f"{name}.py" in room:
            return at
    return None


def test_every_gateway_module_is_in_a_room() -> None:
    homeless = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "gateway").rglob("*.py")
        if path.name != "__init__.py" or path.parent != ROOT / "gateway"
        if _room_of(_module_name(path)) is None
    ]
    assert homeless == []


def test_rooms_import_only_their_own_or_lower_rooms() -> None:
    upward = []
    for path, module in imports("gateway"):
        here, there = _room_of(_module_name(path)), _room_of(module)
        if here is not None and there is not None and there > here:
            upward.append((str(path.relative_to(ROOT)), module))
    assert upward == []
