"""The docs tell the truth: every `hermes` command README.md and the documentation site
show (in their shell blocks and in inline code) parses with the real command line, its
subcommands and options as they are; every config example (a YAML block of config keys,
and config.example.yaml) loads with the real config model. (`make docs` builds the site
with --strict: a broken link or a page left out fails it.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

# typer (0.29, pinned) parses with its own copy of click: its errors are these
from typer._click.exceptions import BadParameter, NoArgsIsHelpError, UsageError

from gateway.cli.main import app
from gateway.config import HermesConfig, parse_config

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PROGRAM = r"(?:^|sudo -u \w+ (?:env \S+ )*|(?<=\s))(?:\.venv/bin/|/opt/hermes/venv/bin/)?hermes"
# where a shell line's hermes command ends: a comment, a pipe, another command
END = re.compile(r"\s+#\s.*$|\s+#$|\s*(?:\|\||\||&&|;|>|2>).*$")


def shell_commands(text: str) -> list[str]:
    found = []
    for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            match = re.match(rf"\s*{PROGRAM} (.*)", line)
            if match and not line.lstrip().startswith("#"):
                found.append(END.sub("", match.group(1)))
    return found


def inline_commands(text: str) -> list[str]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [m for m in re.findall(r"`(?:\.venv/bin/)?hermes ([^`]+)`", prose)]


def documented() -> list[tuple[str, str]]:
    commands = []
    for page in PAGES:
        text = page.read_text()
        name = str(page.relative_to(ROOT))
        commands += [(name, c) for c in shell_commands(text) + inline_commands(text)]
    return commands


def parse(words: list[str]) -> None:
    """Parse as `hermes WORDS` would, down to the last subcommand; nothing runs. Words
    that only name a command (`hermes memory why`, in prose) name one that exists."""
    command: Any = typer.main.get_command(app)
    context = command.make_context("hermes", list(words))
    while hasattr(command, "resolve_command"):  # a group: its subcommand is parsed next
        rest = [*context._protected_args, *context.args]
        if not rest:
            return
        if PLACEHOLDER.match(rest[0]):  # `hermes --as-owner-of-home COMMAND ...`
            return
        name, found, remaining = command.resolve_command(context, rest)
        assert found is not None and name is not None
        if not remaining and not hasattr(found, "resolve_command"):
            return  # the command named, its arguments left to the reader
        command, context = found, found.make_context(name, remaining, parent=context)


# words the docs write for a value the reader fills in: NAME, FILE.jsonl, <id>, ...
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_:-]*(?:\.[a-z0-9.]+)?|\.\.\.|<[^>]+>)$")


def test_the_docs_show_commands() -> None:
    assert len(documented()) > 100  # the extraction finds them (not vacuous)


@pytest.mark.parametrize(("page", "line"), documented())
def test_every_documented_command_parses(page: str, line: str) -> None:
    # optional parts, `[--user ID]` (cut short where a shell line's comment began), go
    line = re.sub(r"\s*\[[^\]]*(?:\]|$)", "", line.replace("…", "..."))
    words = shlex.split(line)
    while words and words[-1] == "...":  # `COMMAND ...`: and its arguments
        words.pop()
    if not words:
        return  # `hermes ...`: the program itself
    eager = {"--install-completion", "--show-completion"} & set(words)
    if eager:  # they act while parsing (write a shell's startup file): named, not run
        top = typer.main.get_command(app)
        assert eager <= {o for p in top.params for o in p.opts}, line
        return
    try:
        parse(words)
    except (typer.Exit, NoArgsIsHelpError):
        pass  # --help, --version, a group named alone (its help): parsed, they end there
    except BadParameter as exc:  # a placeholder where a number or a file goes
        given = [w for w in words if PLACEHOLDER.match(w)]
        assert given, f"{page}: hermes {line}: {exc.format_message()}"
    except UsageError as exc:
        raise AssertionError(f"{page}: hermes {line}: {exc.format_message()}") from None


def config_examples() -> list[tuple[str, str]]:
    sections = set(HermesConfig.model_fields)
    found = []
    for page in [*PAGES, ROOT / "deploy" / "docker" / "compose.yaml"]:
        for block in re.findall(r"```ya?ml\n(.*?)```", page.read_text(), re.S):
            loaded = yaml.safe_load(block)
            if isinstance(loaded, dict) and set(loaded) and set(loaded) <= sections:
                found.append((str(page.relative_to(ROOT)), block))
    return found


def test_the_docs_show_config() -> None:
    assert len(config_examples()) >= 2  # the gateway's and the server guide's


@pytest.mark.parametrize(("page", "block"), config_examples())
def test_every_config_example_loads(page: str, block: str) -> None:
    parse_config(block, page)


def test_config_example_yaml_loads_and_says_every_default() -> None:
    text = (ROOT / "config.example.yaml").read_text()
    assert parse_config(text, "config.example.yaml") == parse_config("", "empty")


def config_keys() -> list[tuple[str, str]]:
    """Every dotted config key the docs name in inline code (`memory.scan.judge`,
    `platforms.telegram.mode`): those that start with a config section."""
    sections = set(HermesConfig.model_fields)
    found = set()
    for page in PAGES:
        for key in re.findall(r"`([a-z_]+(?:\.[a-z_<>]+)+)(?::[^`]*)?`", page.read_text()):
            parts = key.split(".")
            if parts[0] not in sections or _file_or_module(parts):
                continue
            found.add((str(page.relative_to(ROOT)), key))
    return sorted(found)


def _file_or_module(parts: list[str]) -> bool:
    """`dashboard.json` (a file), `gateway.config.side_endpoint` (Python): not keys."""
    files = {"json", "yaml", "yml", "md", "py", "db", "html", "toml", "txt", "jsonl"}
    return parts[-1] in files or (ROOT / parts[0] / f"{parts[1]}.py").exists()


def test_the_docs_name_config_keys() -> None:
    assert len(config_keys()) > 30


@pytest.mark.parametrize(("page", "key"), config_keys())
def test_every_config_key_the_docs_name_exists(page: str, key: str) -> None:
    model: Any = HermesConfig
    for part in key.split("."):
        if model is None or part.startswith("<") or part == "NAME":
            return  # `memory.providers.<name>`: a mapping's key, chosen by the reader
        fields = getattr(model, "model_fields", None)
        if fields is None:  # a mapping (providers, platforms' sections): its keys are free
            return
        assert part in fields, f"{page}: {key}: no {part!r} in {model.__name__}"
        annotation = fields[part].annotation
        model = annotation if isinstance(annotation, type) else None
