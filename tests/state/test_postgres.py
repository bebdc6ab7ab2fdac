"""state.db on PostgreSQL from config.yaml: the URL and its password, the commands that
open it, what an unreachable server or a wrong password looks like, the doctor."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from gateway.config import ConfigError, database_url, parse_config
from hermes.state import postgres as server_state
from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.evidence import EvidenceStore
from hermes.state.factstore import FactStore
from hermes.state.logs import LogFilter
from hermes.state.models import Confirmation, LogRecord, Media, utcnow
from hermes.state.schema import SCHEMA_VERSION
from hermes.state.search import SearchScope
from hermes.state.usage import Usage
from tests.harness.cli import HERMES, hermes
from tests.harness.postgres import ScratchServer
from tests.harness.reminders import telegram_reminder


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
            assert db.upkeep.maintenance().startswith("vacuumed and analyzed messages")
            assert db.upkeep.quick_check() == "ok" and db.upkeep.writable()
        finally:
            db.close()
        doctor = hermes("doctor", "--json", home=home)
        lines = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert lines["database"]["status"] == "ok"
        assert "PostgreSQL 1" in lines["database"]["detail"]
        assert f"schema version {SCHEMA_VERSION}" in lines["database"]["detail"]
        assert lines["gateways"]["detail"].startswith("0 running on the database")
        assert lines["gateways: wake-ups"]["status"] == "ok"  # LISTEN/NOTIFY work here
    finally:
        postgres.drop_schema(name)


def test_an_unreachable_server_is_one_clear_error(home: Path) -> None:
    write_config(home, {"url": "postgresql://hermes@127.0.0.1:1/hermes"})
    done = hermes("sessions", "list", home=home)
    assert done.returncode == 75  # not there (yet): EX_TEMPFAIL, not a configuration error
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
        assert again.returncode != 0 and "already holds data" in again.stderr
        sqlite_home = tmp_path / "sqlite-home"
        refused = hermes("backup", "restore", str(archive), home=sqlite_home)
        assert refused.returncode != 0 and "set database.url" in refused.stderr
        assert not (sqlite_home / "state.db").exists()
    finally:
        postgres.drop_schema(schema)
        postgres.drop_database(other)


def populated_home(home: Path) -> str:
    """A SQLite home with what a real one holds: people with linked accounts, sessions
    in three languages, memory with its provenance and an undo, a reminder, a photo."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text("")
    for entry in ("Prefers tea", "Lives in Lyon"):
        assert hermes("memory", "add", entry, home=home).returncode == 0
    assert hermes("memory", "undo", home=home).returncode == 0
    db = SessionDB.open(home)
    try:
        owner = db.people.users()[0].user.id
        ana = db.people.user_for_identity("telegram", "42", "Ana")
        db.people.ensure_identity("slack", "U42", ana)
        for entry in ("Name: Ana", "Speaks French and Korean"):
            done = hermes("memory", "add", "-t", "user", entry, "--user", ana, home=home)
            assert done.returncode == 0, done.stderr
        for user, platform, words in (
            (owner, "cli", "the boat is called Ondine"),
            (ana, "telegram", "지난주에 부산에서 돼지국밥을 먹었어요"),
            (ana, "slack", "Nous partons à Zürich en décembre"),
        ):
            chat = db.conversations.start_session(user, platform, f"{platform}:dm")
            db.conversations.add_messages(
                chat.id, [NewMessage("user", words), NewMessage("assistant", "noted")]
            )
        (home / "media").mkdir(mode=0o700)
        (home / "media" / "x.jpg").write_bytes(b"\xff\xd8 a photo")
        db.conversations.add_media(
            [
                Media(
                    session_id=chat.id,
                    user_id=ana,
                    sha256="ab" * 32,
                    kind="photo",
                    mime="image/jpeg",
                    bytes=10,
                    path="media/x.jpg",
                )
            ]
        )
        facts = FactStore.at(home)  # the local providers' stores (their files, here)
        facts.add(
            ana,
            "Ana's sister Mina lives in Busan",
            category="general",
            source="tool",
            entities=["Mina"],
            body="Ana's sister Mina lives in Busan",
        )
        evidence = EvidenceStore.at(home)
        evidence.index(
            ana,
            "note",
            "trip.md",
            [("The train to Zürich leaves at 9:10", 1, 1)],
            content_hash="h1",
            size=34,
        )
        chunk = evidence.search_chunks(ana, ["zurich"], 1)[0]
        evidence.review_fact(ana, evidence.add_fact(ana, "Train at 9:10", [chunk.id]), "verified")
        due = datetime.now(UTC) + timedelta(days=1)
        reminder = telegram_reminder(
            ana,
            "42",
            "water the plants",
            id="r_0000000000000001",
            timezone="Europe/Paris",
            due_at=due,
        )
        assert db.reminders.add(10, reminder) is not None
        return ana
    finally:
        db.close()


READS = (
    ("sessions", "list", "--json"),
    ("users", "list", "--json"),
    ("memory", "show", "--json"),
    ("memory", "status", "--all", "--json"),
    ("memory", "why", "tea", "--json"),
    ("reminders", "list", "--all", "--json"),
    ("sessions", "search", "Ondine", "--json"),
    ("sessions", "search", "돼지국밥", "--user", "telegram:42", "--json"),
    ("sessions", "search", "zurich", "--user", "telegram:42", "--json"),
)


@pytest.mark.slow
def test_db_migrate_moves_a_home_and_every_read_command_says_the_same(
    tmp_path: Path, postgres: ScratchServer
) -> None:
    home = tmp_path / "home"
    ana = populated_home(home)
    reads = (
        *READS,
        ("memory", "show", "--user", ana, "--json"),
        ("memory", "why", "Korean", "--user", ana, "--json"),
    )
    before = {args: hermes(*args, home=home) for args in reads}
    exported = hermes("memory", "export", "--files", str(tmp_path / "from-files"), home=home)
    assert exported.returncode == 0, exported.stderr
    for args, done in before.items():
        assert done.returncode == 0, (args, done.stderr)
    for search in READS[-3:]:  # each language is found, before as after
        assert json.loads(before[search].stdout), search
    name, url = postgres.schema()
    try:
        plan = hermes("db", "migrate", "--to", url, "--dry-run", "--json", home=home)
        assert plan.returncode == 0, plan.stderr
        tables = json.loads(plan.stdout)["tables"]
        assert tables["messages"] == 6 and tables["memory_versions"] >= 2
        with InstanceLockHeld(home):  # a gateway running on the home: refused
            refused = hermes("db", "migrate", "--to", url, home=home)
        assert refused.returncode != 0 and "gateway is already running" in refused.stderr
        done = hermes("db", "migrate", "--to", url, "--json", home=home)
        assert done.returncode == 0, done.stderr + done.stdout
        report = json.loads(done.stdout)
        assert report["ok"] and all(t["source_rows"] == t["target_rows"] for t in report["tables"])
        assert report["media_missing"] == []
        stores = [t["table"] for t in report["tables"] if t["table"].startswith("memories/")]
        assert len(stores) == 2 and any(ana in name for name in stores)  # bytes and checksums
        copied = {t["table"]: t["target_rows"] for t in report["tables"] if ".db:" in t["table"]}
        assert copied["holographic.db:facts"] == 1 and copied["evidence.db:fact_chunks"] == 1
        moved = SessionDB.open(home, url)  # the providers' stores of this home: the database's
        assert moved.conversations.media_bytes("media/x.jpg") == b"\xff\xd8 a photo"
        assert [f.content for f in FactStore.at(home).facts(ana)] == [
            "Ana's sister Mina lives in Busan"
        ]
        assert FactStore.at(home).candidates(ana, ["busan"]) != []  # its words indexed
        moved.close()
        write_config(home, {"url": url})  # what the command says to do
        (home / "state.db").rename(home / "state.db.migrated")  # not read any more
        (home / "memories").rename(home / "memories.migrated")  # nor are the files
        for store in ("holographic.db", "evidence.db"):
            (home / store).rename(home / f"{store}.migrated")
        for args, was in before.items():
            now = hermes(*args, home=home)
            assert now.returncode == 0, (args, now.stderr)
            assert now.stdout == was.stdout, args
        out = tmp_path / "from-database"
        assert hermes("memory", "export", "--files", str(out), home=home).returncode == 0
        assert tree(out) == tree(tmp_path / "from-files") and len(tree(out)) == 2
        other = tmp_path / "other"
        populated_home(other)
        again = hermes("db", "migrate", "--to", url, home=other)
        assert again.returncode != 0 and "already holds tables" in again.stderr
    finally:
        postgres.drop_schema(name)


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


class InstanceLockHeld:
    def __init__(self, home: Path) -> None:
        from gateway.instance import InstanceLock

        self.lock = InstanceLock(home)

    def __enter__(self) -> None:
        self.lock.acquire()

    def __exit__(self, *_exc: object) -> None:
        self.lock.release()


@pytest.mark.parametrize("older", [13, 14, 15, 16, 17, 21, 22, 23, 24, 25])
def test_an_older_postgresql_database_upgrades_in_place(
    home: Path, postgres: ScratchServer, older: int
) -> None:
    """A database made by an earlier Hermes (version 13: before the memory stores; 14:
    before the search keys; 15: before the rows of several gateways; 16: before the
    dashboard's rows and the consolidation log; 17: before the providers' outbox; 21:
    before the confirmations; 22: before the kept log lines; 23: before the scheduler's
    controls and history; 24: before the tokens per day; 25: before the platforms' spans)
    is brought to this version on open; its messages are indexed again for the keys and
    found, its memory can be written, a lease taken, a dashboard link used, a provider
    write kept, a question put to a person, a log line kept, a job paused and its run
    kept, the tokens the sessions counted kept per day, a platform's state recorded."""
    name, url = postgres.schema()
    try:
        db = SessionDB.open(home, url)
        user = db.people.ensure_user("u_00000000000000a1").id
        chat = db.conversations.start_session(user, "cli", "cli:dm")
        db.conversations.add_messages(chat.id, [NewMessage("user", "the boat is called Ondine")])
        db.conversations.add_messages(
            chat.id, [NewMessage("assistant", "noted")], usage=Usage(120, 12, "m")
        )
        with db.engine.begin() as conn:  # as the older version left it
            conn.exec_driver_sql("DROP TABLE platform_spans")
            if older < 25:
                conn.exec_driver_sql("DROP TABLE usage_days")
            if older < 24:
                conn.exec_driver_sql("DROP TABLE job_history")
                conn.exec_driver_sql(
                    "ALTER TABLE job_schedules DROP COLUMN paused_at, DROP COLUMN paused_by, "
                    "DROP COLUMN run_asked_at, DROP COLUMN run_asked_by"
                )
            if older < 23:
                conn.exec_driver_sql("DROP TABLE log_records")
            if older < 22:
                conn.exec_driver_sql("DROP TABLE confirmations")
            if older < 21:
                conn.exec_driver_sql("DROP TABLE job_schedules, platform_marks")
            if older < 18:
                conn.exec_driver_sql("DROP TABLE provider_outbox, provider_outbox_drops")
            if older < 17:
                conn.exec_driver_sql(
                    "DROP TABLE dashboard_sessions, dashboard_links, audit_log, consolidation_runs"
                )
            if older < 16:
                conn.exec_driver_sql("DROP TABLE gateway_instances, leases, inbound_seen, inbox")
            if older < 15:
                conn.exec_driver_sql("ALTER TABLE message_terms DROP COLUMN keys")
                conn.exec_driver_sql("DROP INDEX ix_message_terms_cjk_scope")
            if older == 13:
                conn.exec_driver_sql("DROP TABLE memory_stores, memory_archive")
            conn.exec_driver_sql(f"UPDATE hermes_schema SET version = {older}")
        db.close()
        db = SessionDB.open(home, url)
        try:
            assert db.upgraded_from == older and db.upkeep.schema_version() == SCHEMA_VERSION
            assert db.upkeep.index_search() == 2  # what `hermes sessions reindex` runs
            hits = db.conversations.search(SearchScope(user), "boats Ondine")
            assert [h.content for h in hits] == ["the boat is called Ondine"]
            stored = db.memory_stores.read(user, "memory")
            assert db.memory_stores.swap(stored, "Owns a boat", "")
            assert db.cluster.acquire("leader", "gw-1", 30)
            db.outbox.add("mem0", user, "sync_turn", {"user": "hi"})
            assert db.outbox.status("mem0").waiting == 1
            token = db.dashboard.create_link(user, timedelta(minutes=5))
            assert db.dashboard.use_link(token) == user
            soon = utcnow() + timedelta(hours=1)
            asked = Confirmation(code="ASKED", user_id=user, kind="mcp", expires_at=soon)
            db.confirmations.add(asked)
            assert db.confirmations.decide("ASKED", user, yes=True)
            assert db.confirmations.consented(user, "")
            db.logs.add([LogRecord(at=utcnow(), level=40, message="kept after the upgrade")])
            assert [r.message for r in db.logs.find(LogFilter(), 5)] == ["kept after the upgrade"]
            assert db.jobs.pause("maintenance", user)
            db.jobs.record_run("maintenance", True, "ran after the upgrade", instance="h:1")
            assert db.jobs.job_schedules()["maintenance"].paused_by == user
            assert [r.summary for r in db.jobs.history("maintenance")] == ["ran after the upgrade"]
            (used,) = db.usage.totals("person", utcnow().date())
            assert (used.key, used.prompt, used.completion) == (user, 120, 12)
            opened = db.platform_health.record("h:1", {"slack": ("up", "")}, {})
            db.platform_health.record("h:1", {}, opened)
            assert [
                (s.platform, s.ended) for s in db.platform_health.spans(soon - timedelta(hours=2))
            ] == [("slack", True)]
        finally:
            db.close()
    finally:
        postgres.drop_schema(name)


def test_the_homes_of_several_gateways_on_one_database_share_one_owner(
    tmp_path: Path, postgres: ScratchServer
) -> None:
    """Each gateway of several has a home of its own (deploy/README step 10): the first
    command in each registers the owner, and they are the one owner of the database."""
    name, url = postgres.schema()
    try:
        homes = [tmp_path / f"gw{n}" for n in (1, 2, 3)]
        for home in homes:
            write_config(home, {"url": url})
            done = hermes("users", "list", "--json", home=home)
            assert done.returncode == 0, done.stderr
        people = json.loads(hermes("users", "list", "--json", home=homes[0]).stdout)
        owners = [p for p in people if p["role"] == "owner"]
        assert len(owners) == 1, people
        ids = {(home / "owner_id").read_text().strip() for home in homes}
        assert ids == {owners[0]["user_id"]}
    finally:
        postgres.drop_schema(name)


def test_gateway_status_never_shows_a_dead_instance_as_up_or_connected(
    tmp_path: Path, postgres: ScratchServer
) -> None:
    import psycopg

    name, url = postgres.schema()
    try:
        home = tmp_path / "home"
        write_config(home, {"url": url})
        db = SessionDB.open(home, url)
        try:
            db.cluster.register("dead-1", "host-a", 11, {"platforms": {"telegram": "connected"}})
            db.cluster.register("live-2", "host-b", 22, {"platforms": {"slack": "connected"}})
            db.cluster.renew("live-2", 30, {"platforms": {"slack": "connected"}})
        finally:
            db.close()
        with psycopg.connect(url, autocommit=True) as conn:  # killed an hour ago
            conn.execute(
                "UPDATE gateway_instances SET heartbeat_at = now() - interval '1 hour' "
                "WHERE id = 'dead-1'"
            )
        shown = hermes("gateway", "status", home=home)
        assert shown.returncode == 0, shown.stderr
        dead = next(line for line in shown.stdout.splitlines() if "dead-1" in line)
        assert "gone" in dead and "died" in dead and "up " not in dead
        assert "last seen: telegram connected" in dead
        assert "telegram: connected" not in shown.stdout and "slack: connected" in shown.stdout
        listed = json.loads(hermes("gateway", "status", "--json", home=home).stdout)
        by_id = {i["id"]: i for i in listed["instances"]}
        assert listed["backend"] == "postgresql" and listed["running"]
        assert by_id["dead-1"]["alive"] is False and by_id["dead-1"]["platforms"] == {}
        assert by_id["dead-1"]["last_platforms"] == {"telegram": "connected"}
        assert by_id["live-2"]["platforms"] == {"slack": "connected"}
        assert set(listed) == {"home", "backend", "running", "instances", "inbox"}
    finally:
        postgres.drop_schema(name)


def test_a_pg_dump_that_refuses_the_server_says_why(
    tmp_path: Path, postgres: ScratchServer
) -> None:
    """pg_dump older than the server refuses it; its reason is on the `detail:` line, not
    the last one: the backup's message keeps both (a pg_dump on PATH that answers as
    pg_dump 15 does to a PostgreSQL 16 server)."""
    import os

    name, url = postgres.schema()
    try:
        home = tmp_path / "home"
        write_config(home, {"url": url})
        assert hermes("users", "list", home=home).returncode == 0
        tools = tmp_path / "bin"
        tools.mkdir()
        (tools / "pg_dump").write_text(
            "#!/bin/sh\n"
            "echo 'pg_dump: error: aborting because of server version mismatch' >&2\n"
            "echo 'pg_dump: detail: server version: 16.1; pg_dump version: 15.19' >&2\n"
            "exit 1\n"
        )
        (tools / "pg_dump").chmod(0o755)
        path = f"{tools}{os.pathsep}{os.environ['PATH']}"
        done = subprocess.run(
            [*HERMES, "backup", "create", str(tmp_path / "b.tar.gz")],
            env={**os.environ, "HERMES_HOME": str(home), "PATH": path},
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        said = " ".join(done.stderr.split())
        assert done.returncode != 0 and "Traceback" not in said
        assert "server version mismatch" in said and "pg_dump version: 15.19" in said, said
    finally:
        postgres.drop_schema(name)


def test_a_dry_run_migration_asks_the_server(tmp_path: Path, postgres: ScratchServer) -> None:
    """`db migrate --dry-run` to a database that does not exist fails, as the real run
    would, instead of promising a copy."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("")
    assert hermes("memory", "add", "Prefers tea", home=home).returncode == 0
    base = postgres.admin_url.rpartition("/")[0]
    done = hermes("db", "migrate", "--to", f"{base}/no_such_database", "--dry-run", home=home)
    assert done.returncode != 0 and "does not exist" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_pooled_connection_the_server_dropped_while_idle_is_replaced_unseen(
    db: SessionDB,
) -> None:
    """A connection idle in the pool is checked before it is used again (not one given
    back a moment ago: a check before every transaction was a round trip each): the
    server ended it meanwhile (a restart, a failover), and the next read and write go
    on a new one without an error."""
    user = db.people.ensure_user("u_00000000000000d1").id
    before = db.conversations.start_session(user, "cli", "k")
    with db.engine.connect() as conn:  # the server ends every other connection
        conn.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        conn.commit()
    time.sleep(server_state.PING_AFTER_IDLE_S + 0.2)
    assert db.conversations.get_session(before.id, user) is not None
    assert db.conversations.start_session(user, "cli", "k2").id != before.id
