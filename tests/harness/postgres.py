"""PostgreSQL for the tests: a database this test session (each xdist worker) creates
and drops itself, with a fresh schema in it for a test that asks for an empty one; and,
for each test on the `postgresql` backend, a database of its own cloned from a template
this session migrated once (`CREATE DATABASE ... TEMPLATE`: a copy of the files, about
a tenth of a second, where making and migrating a schema took about four times that).

The server is named by an admin URL in HERMES_TEST_POSTGRES (default: the server these
machines run, postgresql://postgres@127.0.0.1:5432/postgres; any role that may create
databases will do). With none answering, a test that needs it fails under CI, saying how
to point the tests at a server, and is skipped elsewhere (saying the same).
"""

from __future__ import annotations

import itertools
import os
import secrets
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

BACKENDS = ["sqlite", "postgresql"]
# a test about SQLite itself (the file, its pragmas, a plain sqlite3 program) says so
sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
ADMIN_URL_VAR = "HERMES_TEST_POSTGRES"
DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


class ScratchServer:
    """One database of this session on the test server; schemas handed out in it."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.database = f"hermes_test_{os.getpid()}_{secrets.token_hex(3)}"
        base, _, _ = admin_url.rpartition("/")
        self.url = f"{base}/{self.database}"
        self._schemas = itertools.count(1)
        self._template: str | None = None

    def create(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")

    def drop(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            if self._template is not None:
                conn.execute(f'DROP DATABASE IF EXISTS "{self._template}" WITH (FORCE)')

    def migrated(self) -> tuple[str, str]:
        """A new database as the product leaves one it has opened (migrated, empty): a
        clone of this session's template; (its name, its URL); drop_database it."""
        import psycopg

        template = self._template or self._make_template()
        name = f"{self.database}_{next(self._schemas)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name, self._url_of(name)

    def _make_template(self) -> str:
        """This session's migrated database, made once; nothing stays connected to it
        (a template with a connection cannot be copied)."""
        import psycopg

        from hermes.state.db import SessionDB

        name = f"{self.database}_template"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(self._url_of(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        with tempfile.TemporaryDirectory() as home:
            SessionDB.open(Path(home), self._url_of(name)).close()
        self._template = name
        return name

    def _url_of(self, database: str) -> str:
        base, _, _ = self.admin_url.rpartition("/")
        return f"{base}/{database}"

    def schema(self) -> tuple[str, str]:
        """A new empty schema: (its name, a URL whose connections work in it)."""
        import psycopg

        name = f"t_{next(self._schemas)}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        options = quote(f"-csearch_path={name},public")
        return name, f"{self.url}?options={options}"

    def other_database(self) -> tuple[str, str]:
        """Another empty database on the server: (its name, its URL); drop_database it."""
        import psycopg

        name = f"{self.database}_{next(self._schemas)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name, self._url_of(name)

    def documented(self) -> tuple[str, str]:
        """A role and its database made as deploy/README step 9 says, with the real
        programs: `createuser` (no superuser, no CREATEDB) and `createdb --owner ROLE`:
        (the role, the database)."""
        name = f"{self.database}_{next(self._schemas)}"
        host, port, admin = self._admin_parts()
        where = ["-h", host, "-p", port, "-U", admin]
        subprocess.run(["createuser", *where, name], check=True, capture_output=True)
        subprocess.run(["createdb", *where, "--owner", name, name], check=True, capture_output=True)
        return name, name

    def _admin_parts(self) -> tuple[str, str, str]:
        parts = urlsplit(self.admin_url)
        return parts.hostname or "127.0.0.1", str(parts.port or 5432), parts.username or "postgres"

    def drop_role(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{name}"')

    def drop_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def drop_schema(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def start_test_server() -> ScratchServer:
    """The session's database, or the test fails (under CI) or skips saying why."""
    admin = os.environ.get(ADMIN_URL_VAR, DEFAULT_ADMIN_URL)
    server = ScratchServer(admin)
    try:
        server.create()
    except Exception as exc:
        message = (
            f"no PostgreSQL server for the tests at {admin} ({str(exc).strip()}). Start one, "
            f"or point the tests at another with {ADMIN_URL_VAR}=postgresql://USER@HOST:PORT/"
            "DATABASE (a role that may create databases)."
        )
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return server


__all__ = ["ADMIN_URL_VAR", "BACKENDS", "ScratchServer", "sqlite_only", "start_test_server"]
