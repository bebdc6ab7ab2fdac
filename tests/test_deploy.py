"""What of deploy/ can be checked on a machine without systemd running or a container
builder: the unit passes `systemd-analyze verify` and is hardened; the Dockerfile runs
the install steps deploy/README.md gives, and compose runs it with a volume, an env file
and the health check. (hadolint lints the Dockerfile in `make lint`.)"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.harness.postgres import ScratchServer

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "deploy" / "hermes-gateway.service"
TEMPLATE = ROOT / "deploy" / "hermes-gateway@.service"  # several gateways on one machine
# each unit, the name systemd starts it by, and the home it gives the gateway
UNITS = [
    (UNIT, UNIT.name, "/var/lib/hermes"),
    (TEMPLATE, "hermes-gateway@gw1.service", "/var/lib/hermes/%i"),
]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
README = ROOT / "deploy" / "README.md"


def unit_settings(unit: Path = UNIT) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
@pytest.mark.parametrize(("unit", "started_as", "_home"), UNITS, ids=["one", "several"])
def test_the_unit_passes_systemd_analyze_verify(
    tmp_path: Path, unit: Path, started_as: str, _home: str
) -> None:
    """In a throwaway root holding the unit, the system's own units and the program."""
    program = tmp_path / "opt" / "hermes" / "venv" / "bin" / "hermes"
    program.parent.mkdir(parents=True)
    shutil.copy(Path(sys.executable).parent / "hermes", program)
    units = tmp_path / "etc" / "systemd" / "system"
    units.mkdir(parents=True)
    shutil.copy(unit, units / unit.name)
    system = Path("/usr/lib/systemd/system")
    if system.is_dir():
        shutil.copytree(system, tmp_path / "usr" / "lib" / "systemd" / "system", symlinks=True)
    done = subprocess.run(
        ["systemd-analyze", "verify", f"--root={tmp_path}", started_as],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
    # the check bites: a misspelt key is reported
    (units / unit.name).write_text(unit.read_text().replace("NoNewPrivileges", "NoNewPrivilege"))
    typo = subprocess.run(
        ["systemd-analyze", "verify", f"--root={tmp_path}", started_as],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Unknown key 'NoNewPrivilege'" in typo.stderr


@pytest.mark.parametrize(("path", "_started_as", "home"), UNITS, ids=["one", "several"])
def test_the_unit_is_unprivileged_hardened_and_restarts(
    path: Path, _started_as: str, home: str
) -> None:
    unit = unit_settings(path)
    assert unit["User"] == ["hermes"] and unit["EnvironmentFile"] == ["/etc/hermes/env"]
    assert unit["Environment"] == [f"HERMES_HOME={home}"]
    assert unit["ReadWritePaths"] == [home]
    for key, value in {
        "NoNewPrivileges": "true",
        "ProtectSystem": "strict",
        "ProtectHome": "true",
        "PrivateTmp": "true",
        "PrivateDevices": "true",
        "UMask": "0077",
        "CapabilityBoundingSet": "",
        "Restart": "on-failure",
    }.items():
        assert unit[key] == [value], key
    assert unit["ExecStart"] == ["/opt/hermes/venv/bin/hermes gateway run"]
    # a dependency not there yet (exit 75) is restarted; only a configuration error is not
    assert unit["RestartPreventExitStatus"] == ["2"]
    assert unit["After"] == ["network-online.target postgresql.service"]
    assert unit["Wants"] == ["network-online.target"]


def readme_install() -> list[str]:
    block = re.search(r"<!-- install:begin -->\s*```sh\n(.*?)```", README.read_text(), re.S)
    assert block is not None
    return [_normal(line) for line in block.group(1).splitlines() if line.strip()]


def dockerfile_runs() -> list[str]:
    """The image's RUN steps but the system packages' (apt-get: step 1's prose)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    commands: list[str] = []
    for line in text.splitlines():
        if line.startswith("RUN ") and "apt-get" not in line:
            commands += [_normal(part) for part in line[4:].split("&&")]
    return commands


def _normal(command: str) -> str:
    words = shlex.split(command)
    return " ".join(word for word in words if word != "--no-cache-dir")


def test_the_dockerfile_runs_the_readme_install_steps() -> None:
    readme = readme_install()
    docker = dockerfile_runs()
    # the README clones the checkout where the image COPYs its sources; every other step is
    # the same
    assert [c for c in readme if not c.startswith("git clone")] == docker
    clone = next(c for c in readme if c.startswith("git clone"))
    assert (
        clone.endswith(" /opt/hermes/src")
        and "COPY hermes /opt/hermes/src/hermes" in DOCKERFILE.read_text()
    )
    text = DOCKERFILE.read_text()
    assert "USER hermes" in text and "HEALTHCHECK" in text and "/healthz" in text
    assert 'VOLUME ["/var/lib/hermes"]' in text and "HERMES_HOME=/var/lib/hermes" in text
    assert re.search(r"^FROM python:3\.\d+-slim-bookworm$", text, re.M)


def test_the_image_has_the_backup_tools_of_compose_postgres_major() -> None:
    """`hermes backup` on PostgreSQL runs pg_dump: the image carries the client of the
    major compose's postgres service runs (bookworm's postgresql-client is 15)."""
    text = DOCKERFILE.read_text()
    assert "apt-get install -y --no-install-recommends postgresql-client" in text
    compose = yaml.safe_load((ROOT / "deploy" / "docker" / "compose.yaml").read_text())
    assert compose["services"]["postgres"]["image"] == "postgres:15"
    assert "-slim-bookworm" in text  # Debian 12: postgresql-client 15


def test_compose_runs_the_image_with_its_volume_env_file_and_health_check() -> None:
    compose = yaml.safe_load((ROOT / "deploy" / "docker" / "compose.yaml").read_text())
    service = compose["services"]["hermes"]
    assert service["build"]["dockerfile"] == "deploy/docker/Dockerfile"
    assert service["env_file"] == "hermes.env"
    assert (
        "hermes-data:/var/lib/hermes" in service["volumes"] and "hermes-data" in compose["volumes"]
    )
    assert "/healthz" in " ".join(service["healthcheck"]["test"])
    assert all(port.startswith("127.0.0.1:") for port in service["ports"])
    # the optional postgres profile: started after it is healthy, when it is there
    assert service["depends_on"]["postgres"] == {"condition": "service_healthy", "required": False}


def test_the_cluster_compose_runs_three_gateways_on_postgres_behind_the_proxy() -> None:
    """deploy/docker/compose.cluster.yaml: PostgreSQL, three gateways (each a volume of
    its own, the one config read-only, ready when /readyz says so) and Caddy spreading
    the webhook paths over them."""
    folder = ROOT / "deploy" / "docker"
    compose = yaml.safe_load((folder / "compose.cluster.yaml").read_text())
    services = compose["services"]
    gateways = [name for name in services if name.startswith("gw")]
    assert gateways == ["gw1", "gw2", "gw3"] and "postgres" in services
    for name in gateways:
        service = services[name]
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert f"{name}-data:/var/lib/hermes" in service["volumes"]
        assert "./cluster.config.yaml:/var/lib/hermes/config.yaml:ro" in service["volumes"]
        assert "/readyz" in " ".join(service["healthcheck"]["test"])
        assert "ports" not in service  # reached through the proxy only
    caddy = (folder / "Caddyfile").read_text()
    assert "gw1:8787 gw2:8787 gw3:8787" in caddy
    assert "/telegram/webhook" in caddy and "/slack/events" in caddy
    assert services["proxy"]["volumes"][0] == "./Caddyfile:/etc/caddy/Caddyfile:ro"


def test_no_secrets_file_or_environment_can_reach_the_image_or_git() -> None:
    """deploy/README tells people to create deploy/docker/hermes.env beside the compose
    file: it stays out of git, out of the build context, and the Dockerfile copies only
    the package's sources by name."""
    copies = [line.split()[1:-1] for line in DOCKERFILE.read_text().splitlines()
              if line.startswith(("COPY", "ADD"))]  # fmt: skip
    sources = {source for sources in copies for source in sources}
    assert sources == {
        "pyproject.toml",
        "README.md",
        "requirements",
        "hermes",
        "gateway",
        "adapters",
    }
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"**/*.env", ".venv", ".git"} <= set(ignored)
    checked = subprocess.run(
        ["git", "check-ignore", "deploy/docker/hermes.env", "hermes.env", ".env"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.stdout.split() == ["deploy/docker/hermes.env", "hermes.env", ".env"]


def _block(marker: str) -> str:
    found = re.search(rf"<!-- {marker}:begin -->\s*```sh\n(.*?)```", README.read_text(), re.S)
    assert found is not None, marker
    return found.group(1)


def _readme_unit(name: str) -> dict[str, list[str]]:
    found = re.search(
        rf"cat > /etc/systemd/system/{name} <<'UNIT'\n(.*?)\nUNIT", README.read_text(), re.S
    )
    assert found is not None, name
    settings: dict[str, list[str]] = {}
    for line in found.group(1).splitlines():
        if "=" in line:
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_the_backup_unit_runs_with_the_gateways_user_home_and_secrets() -> None:
    """With PostgreSQL, `hermes backup create` needs the database password: the daily
    unit reads the same environment file as the gateway."""
    backup, gateway = _readme_unit("hermes-backup.service"), unit_settings(UNIT)
    for key in ("User", "Environment", "EnvironmentFile"):
        assert backup[key] == gateway[key], key
    assert backup["ExecStart"] == ["/opt/hermes/venv/bin/hermes backup create"]


def test_the_shorthand_runs_as_the_service_with_its_environment_file(
    tmp_path: Path, postgres: ScratchServer
) -> None:
    """deploy/README's `hermes` shell function, run as written (sudo's user switch aside,
    the paths moved into a temporary folder) against a home on PostgreSQL whose password
    variable only the environment file sets, with arguments that need quoting."""
    name, url = postgres.schema()
    try:
        home, env_file = tmp_path / "home", tmp_path / "env"
        home.mkdir(mode=0o700)
        (home / "config.yaml").write_text(
            yaml.safe_dump({"database": {"url": url, "password_env": "HERMES_DB_PASSWORD"}})
        )
        env_file.write_text("HERMES_DB_PASSWORD='not used by trust auth'\n")
        function = (
            _block("shorthand")
            .replace("/etc/hermes/env", str(env_file))
            .replace("/var/lib/hermes", str(home))
            .replace("/opt/hermes/venv/bin/hermes", str(Path(sys.executable).parent / "hermes"))
        )
        sudo = 'sudo() { shift 2; "$@"; }'  # `sudo -u hermes CMD...`: CMD as this user
        env = {k: v for k, v in os.environ.items() if k != "HERMES_HOME"}

        def run(command: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["bash", "-c", f"{sudo}\n{function}\n{command}"],
                capture_output=True, text=True, check=False, env=env, timeout=120,
            )  # fmt: skip

        # one argument with a quote, a space and a dollar sign reaches hermes as it was typed
        done = run("""hermes memory add 'it'"'"'s a $HOME-free entry'""")
        assert done.returncode == 0, done.stdout + done.stderr
        shown = run("hermes memory show --json")
        assert "it's a $HOME-free entry" in shown.stdout, shown.stderr
    finally:
        postgres.drop_schema(name)
