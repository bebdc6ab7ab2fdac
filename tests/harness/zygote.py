"""A process that has imported the command line once and forks a new process for each
`hermes ...` a test runs (what `tests/harness/cli.py` `hermes()` asks it for).

A command in a new interpreter spends about a second importing SQLAlchemy, the models
and the command modules before it does anything; forked from here, the same command is a
real process of its own (its own stdin, stdout and stderr, environment, working folder
and exit status, its interpreter's normal shutdown) that starts with those modules
already imported: a tenth of the time. Nothing has run yet when it forks. Imported, the
commands' modules read nothing from the disk and from the environment only the
terminal's width and colours (gateway/cli/output.py's consoles): this process is started
with what every test's command has (COLUMNS=200, NO_COLOR=1, no terminal).

Run as `python -c "from tests.harness.zygote import serve; serve(PATH)"` (as the
commands' own `python -c` runs, so `sys.path` is the same): it listens on the Unix socket
PATH. A request is one JSON object (args, env, cwd) with three file descriptors beside
it (SCM_RIGHTS: stdin, stdout, stderr). For each, a waiter process is forked, which
forks the command and answers "<pid>\\n" at once, then "<exit status>\\n" when it ends
(the waiter waits, so several commands run at once, as subprocesses would). A request
naming a `script` runs that file as `python SCRIPT ARGS` would, instead of the command
line (the crash tests' workers, started dozens of times each).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import pkgutil
import random
import runpy
import signal
import socket
import sys
from typing import Any

PRELOAD = ("gateway.cli", "hermes.state.db", "hermes.config", "hermes.memory.tool")
SCRIPT: str | None = None  # in a forked process: the script its request names, if any


def _preload() -> None:
    import gateway.cli
    import gateway.cli.main

    for found in pkgutil.iter_modules(gateway.cli.__path__):
        importlib.import_module(f"gateway.cli.{found.name}")
    for name in PRELOAD[1:]:
        importlib.import_module(name)
    from sqlalchemy.orm import configure_mappers

    configure_mappers()  # the models' mappers, set up at a command's first query otherwise
    # what is imported now moves to the collector's permanent generation, never walked
    # again: a forked command's collections and its exit do not touch (and so copy) the
    # pages of every object it inherited (an exit took 0.32 s of a command's 0.5; 0.04)
    gc.freeze()


def serve(path: str) -> None:
    """Listen at `path` until killed; returns only in a forked command's process, made
    to look as `python -c` started with its request's arguments, environment and
    folder (the caller then runs the command line's `main()`)."""
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the kernel
    listener.settimeout(1.0)
    parent = os.getppid()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process is gone (killed): so are we
                sys.exit(0)
            continue
        conn.setblocking(True)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(message.decode())
        if os.fork() == 0:  # the waiter
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # it waits for its command
            command = os.fork()
            if command == 0:
                conn.close()
                _become(request, fds)
                return
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{command}\n".encode())
            _, status = os.waitpid(command, 0)
            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            os._exit(0)
        conn.close()
        for fd in fds:
            os.close(fd)


def _become(request: dict[str, Any], fds: list[int]) -> None:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    random.seed()  # not the same numbers as every other command
    global SCRIPT
    SCRIPT = request.get("script")
    sys.argv = [SCRIPT, *request["args"]] if SCRIPT else ["-c", *request["args"]]


def main(path: str) -> None:
    serve(path)
    if SCRIPT is not None:  # `python SCRIPT ARGS`: its folder first on the path
        sys.path.insert(0, os.path.dirname(SCRIPT))
        runpy.run_path(SCRIPT, run_name="__main__")
        return
    from gateway.cli.main import main as hermes_main

    hermes_main()


__all__ = ["main", "serve"]
