"""An admin command run as another user (root, say) on the service's home would leave
files the service cannot write: commands refuse, unless --as-owner-of-home; doctor
finds files owned by anyone but the home's owner; restore makes its folders 0700."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.harness.cli import hermes

SERVICE_UID = 65534  # "nobody": the service user, as the tests run as root


def owned_by_service(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chown(home, SERVICE_UID, SERVICE_UID)


def test_a_command_on_a_home_of_another_user_is_refused_with_the_way_out(home: Path) -> None:
    owned_by_service(home)
    for command in (["memory", "status"], ["memory", "add", "x"], ["backup", "create"]):
        refused = hermes(*command, home=home)
        assert refused.returncode == 1, refused.stderr
        assert "uid 65534" in refused.stderr and "--as-owner-of-home" in refused.stderr
        assert "sudo -u" in refused.stderr and "Traceback" not in refused.stderr
    assert [p.name for p in home.iterdir()] == []  # nothing was written
    forced = hermes("--as-owner-of-home", "memory", "add", "Runs Fedora", home=home)
    assert forced.returncode == 0, forced.stderr


def test_doctor_finds_files_not_owned_by_the_homes_owner(home: Path) -> None:
    assert hermes("memory", "add", "Runs Fedora", home=home).returncode == 0
    stranger = next(p for p in home.rglob("MEMORY.md"))
    os.chown(stranger, SERVICE_UID, SERVICE_UID)
    report = json.loads(hermes("doctor", "--json", home=home).stdout)
    check = next(c for c in report["checks"] if c["name"] == "HERMES_HOME permissions")
    assert check["status"] == "fail" and "MEMORY.md" in check["detail"]
    assert "uid 65534" in check["detail"] and "chown -R" in check["fix"]


def test_restore_makes_every_folder_owner_only(home: Path, tmp_path: Path) -> None:
    assert hermes("memory", "add", "Runs Fedora", home=home).returncode == 0
    archive = tmp_path / "b.tar.gz"
    assert hermes("backup", "create", str(archive), home=home).returncode == 0
    fresh = tmp_path / "fresh"
    previous = os.umask(0o022)  # a usual umask: folders would be 0755 by default
    try:
        assert hermes("backup", "restore", str(archive), home=fresh).returncode == 0
    finally:
        os.umask(previous)
    folders = [p for p in [fresh, *fresh.rglob("*")] if p.is_dir()]
    assert len(folders) > 2 and {p.stat().st_mode & 0o777 for p in folders} == {0o700}
