"""`hermes memory export --files` and `hermes memory import`, wherever the stores are
kept (the files beside SQLite, the database's rows on PostgreSQL): real MEMORY.md and
USER.md files out, an edited folder back in as one recorded, undoable change per
store, and a file over its limit refused whole."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from hermes.identity import owner_user_id
from hermes.memory import entries as fmt
from tests.harness.cli import hermes


def configure(home: Path, database_url: str | None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    config = {"database": {"url": database_url}} if database_url else {}
    (home / "config.yaml").write_text(yaml.safe_dump(config))


def shown(home: Path, *args: str) -> list[str]:
    done = hermes("memory", "show", "memory", "--json", *args, home=home)
    assert done.returncode == 0, done.stderr
    entries: list[str] = json.loads(done.stdout)["memory"]["entries"]
    return entries


def test_export_edit_import_and_undo(home: Path, tmp_path: Path, database_url: str | None) -> None:
    configure(home, database_url)
    for entry in ("Prefers tea", "Lives in Lyon"):
        assert hermes("memory", "add", entry, home=home).returncode == 0
    assert hermes("memory", "add", "-t", "user", "Name: Ana", home=home).returncode == 0
    out = tmp_path / "out"
    done = hermes("memory", "export", "--files", str(out), home=home)
    assert done.returncode == 0, done.stderr
    owner = owner_user_id(home)
    memory_md = out / owner / "MEMORY.md"
    assert memory_md.read_text() == "Prefers tea\n§\nLives in Lyon"  # the seed's format
    assert (out / owner / "USER.md").read_text() == "Name: Ana"
    assert oct(memory_md.stat().st_mode & 0o777) == "0o600"

    memory_md.write_text(fmt.serialize(["Prefers green tea", "Lives in Lyon", "Has a cat"]))
    done = hermes("memory", "import", str(out), home=home)
    assert done.returncode == 0, done.stderr
    assert shown(home) == ["Prefers green tea", "Lives in Lyon", "Has a cat"]
    why = json.loads(hermes("memory", "why", "cat", "--json", home=home).stdout)
    assert [(c["action"], c["actor"]) for c in why] == [("import", "admin")]
    again = hermes("memory", "import", str(out), home=home)  # the same files: nothing to do
    assert again.returncode == 0 and "unchanged" in again.stderr + again.stdout
    assert hermes("memory", "undo", home=home).returncode == 0
    assert shown(home) == ["Prefers tea", "Lives in Lyon"]

    memory_md.write_text("x" * 3000)  # over the 2,200-char limit: refused, nothing written
    refused = hermes("memory", "import", str(out), home=home)
    assert refused.returncode != 0 and "over its limit" in refused.stderr + refused.stdout
    assert shown(home) == ["Prefers tea", "Lives in Lyon"]
