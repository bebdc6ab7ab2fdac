"""A fresh install of the project, made as the docs say, for the tests that start where a
new user starts: a copy of the checkout (the files git knows, as they are now) in a new
folder, and a virtual environment of its own with nothing but what the install put there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 900  # a cold pip cache on a slow machine


def clean_clone(into: Path) -> Path:
    """The checkout's files as a clean clone has them (tracked and new, never ignored:
    no .venv, no caches), copied to `into`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without what points into the test's own venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"} and not k.startswith("PYTEST")
    }
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env.update(COLUMNS="200", NO_COLOR="1", **extra)
    return env


@dataclass(frozen=True)
class Install:
    """A checkout and the virtual environment an install made for it."""

    checkout: Path
    venv: Path

    @property
    def hermes(self) -> Path:
        return self.venv / "bin" / "hermes"

    def run(
        self, *args: str, home: Path, stdin: str = "", timeout: float = 120, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.hermes), *args],
            capture_output=True, text=True, input=stdin, timeout=timeout, check=False,
            env=clean_environment(HERMES_HOME=str(home), **env), cwd=self.checkout,
        )  # fmt: skip

    def start(self, *args: str, home: Path, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.hermes), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=clean_environment(HERMES_HOME=str(home), **env), cwd=self.checkout,
        )  # fmt: skip

    def imports(self, module: str) -> bool:
        done = subprocess.run(
            [str(self.venv / "bin" / "python"), "-c", f"import {module}"],
            capture_output=True, check=False, env=clean_environment(),
        )  # fmt: skip
        return done.returncode == 0


def make_install(folder: Path, extras: str) -> Install:
    """deploy/README.md step 1 in a clean clone: a new venv, then
    `pip install -c CHECKOUT/requirements/constraints.txt 'CHECKOUT[extras]'`
    (`extras` '' : the base dependencies only).

    The same packages land in the venv as the docs' commands put there, made faster in
    two ways that change nothing the product sees: the venv is made without its own
    pip (ensurepip: about 4.5 s a venv), this pip installing into it (`--python`), and
    without byte-compiling every module (`--no-compile`: Python compiles what it imports
    on first use; about a third of an install's CPU). `make chat` from a clean clone,
    the README's own path, is tested as it is (tests/install/test_installs.py)."""
    checkout = clean_clone(folder / "src")
    venv = folder / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        check=True, env=clean_environment(),
    )  # fmt: skip
    target = f"{checkout}[{extras}]" if extras else str(checkout)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--quiet", "--no-compile", "-c", str(checkout / "requirements" / "constraints.txt"),
         target],
        capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False,
        env=clean_environment(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return Install(checkout, venv)
