"""state.db on PostgreSQL from config.yaml: the URL and its password, the commands that
open it, what an unreachable server or a wrong password looks like, the doctor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gateway.config import ConfigError, database_url, parse_config
from hermes.state.db import SessionDB
from hermes.state.schema import SCHEMA_VERSION
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
