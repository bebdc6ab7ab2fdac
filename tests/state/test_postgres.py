"""state.db on PostgreSQL from config.yaml: the URL and its password, the commands that
open it, what an unreachable server or a wrong password looks like, the doctor."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from gateway.config import ConfigError, database_url, parse_config
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.schema import SCHEMA_VERSION
from hermes.state.search import SearchScope
from tests.harness.cli import hermes
from tests.harness.postgres import ScratchServer


def write_config(home: Path, database: dict[str, object]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump({"database": database}))


def test_the_password_comes_from_the_environment_never_the_file() -> None:
    config = parse_config(
        "database:\n  url: postgresql://hermes@db.internal:5432/hermes?sslmode=require\n"
        "  password_env: HERMES_DB_PASSWORD\n",
        "config.yaml",
    )
    url = database_url(config, {"HERMES_DB_PASSWORD": "p@ss:w/rd"})
    assert url == "postgresql://hermes:p%40ss%3Aw%2Frd@db.internal:5432/hermes?sslmode=require"
    with pytest.raises(ConfigError, match="HERMES_DB_PASSWORD, which is not set"):
        database_url(config, {})
    with pytest.raises(ConfigError, match="holds a password"):
        parse_config("database:\n  url: postgresql://u:secret@h/db\n", "config.yaml")
    with pytest.raises(ConfigError, match="a PostgreSQL URL"):
        parse_config("database:\n  url: mysql://u@h/db\n", "config.yaml")
    assert database_url(parse_config("", "config.yaml")) is None  # SQLite, in the home


def test_the_commands_use_the_configured_database(home: Path, postgres: ScratchServer) -> None:
    name, url = postgres.schema()
    try:
        write_config(home, {"url": url})
        done = hermes("users", "list", "--json", home=home)
        assert done.returncode == 0, done.stderr
        assert not (home / "state.db").exists()  # nothing went to a local file
        db = SessionDB.open(home, url)
        try:
            people = db.people.users()
            assert [p.user.role for p in people] == ["owner"]
            assert db.upkeep.schema_version() == SCHEMA_VERSION
        finally:
            db.close()
        doctor = hermes("doctor", "--json", home=home)
        lines = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert lines["database"]["status"] == "ok"
        assert "PostgreSQL 1" in lines["database"]["detail"]
        assert f"schema version {SCHEMA_VERSION}" in lines["database"]["detail"]
    finally:
        postgres.drop_schema(name)


def test_an_unreachable_server_is_one_clear_error(home: Path) -> None:
    write_config(home, {"url": "postgresql://hermes@127.0.0.1:1/hermes"})
    done = hermes("sessions", "list", home=home)
    assert done.returncode == 2
    assert "cannot use the PostgreSQL database postgresql://hermes@127.0.0.1:1/hermes" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr + done.stdout
    write_config(home, {"url": "postgresql://hermes@127.0.0.1:1/hermes", "password_env": "NOPE"})
    done = hermes("sessions", "list", home=home)
    assert done.returncode == 2 and "NOPE, which is not set" in done.stderr


def test_a_backup_of_a_postgresql_home_restores_into_an_empty_database(
    tmp_path: Path, postgres: ScratchServer
) -> None:
    schema, url = postgres.schema()
    other, other_url = postgres.other_database()
    source, target = tmp_path / "source", tmp_path / "target"
    try:
        write_config(source, {"url": url})
        db = SessionDB.open(source, url)
        user = db.people.ensure_user("u_00000000000000a1", role="owner").id
        chat = db.conversations.start_session(user, "cli", "cli:dm")
        db.conversations.add_messages(chat.id, [NewMessage("user", "the boat is called Ondine")])
        db.close()
        (source / "memories").mkdir(mode=0o700)
        (source / "memories" / "note.md").write_text("kept")
        archive = tmp_path / "home.tar.gz"
        done = hermes("backup", "create", str(archive), home=source)
        assert done.returncode == 0, done.stderr
        # the target: a home whose config names an empty database (the same schema name)
        restored_url = f"{other_url}?options={quote(f'-csearch_path={schema},public')}"
        write_config(target, {"url": restored_url})
        done = hermes("backup", "restore", str(archive), "--force", home=target)
        assert done.returncode == 0, done.stderr + done.stdout
        assert (target / "memories" / "note.md").read_text() == "kept"
        kept = yaml.safe_load((target / "config.yaml").read_text())["database"]
        assert kept["url"] == restored_url  # not the database the archive was taken from
        assert not (target / "state.db").exists() and not (target / "state.pgdump").exists()
        back = SessionDB.open(target, restored_url)
        try:
            hits = back.conversations.search(SearchScope(user), "Ondine")
            assert [h.content for h in hits] == ["the boat is called Ondine"]
        finally:
            back.close()
        again = hermes("backup", "restore", str(archive), "--force", home=target)
        assert again.returncode != 0 and "already holds tables" in again.stderr
        sqlite_home = tmp_path / "sqlite-home"
        refused = hermes("backup", "restore", str(archive), home=sqlite_home)
        assert refused.returncode != 0 and "set database.url" in refused.stderr
        assert not (sqlite_home / "state.db").exists()
    finally:
        postgres.drop_schema(schema)
        postgres.drop_database(other)
