"""Hermes on the command line, as tests drive it: `hermes(...)` runs one command in
a process of its own (forked from one that has imported the command line already:
tests/harness/zygote.py); `Terminal` runs one in a pseudo-terminal, driven like a person
at a keyboard (prompts, Ctrl-C)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

HERMES = [sys.executable, "-c", "from gateway.cli.main import main; main()"]


def hermes(
    *args: str,
    home: Path | None = None,
    answer: str | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`hermes ARGS` as a process of its own (in the folder `cwd`, else this one's);
    `answer` is typed on its stdin (else it has none). As `subprocess.run` would: its
    output, its exit status, TimeoutExpired."""
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1")
    if home is not None:
        env["HERMES_HOME"] = str(home)
    with contextlib.ExitStack() as files:
        stdin, stdout, stderr = (files.enter_context(tempfile.TemporaryFile()) for _ in "012")
        stdin.write((answer or "").encode())
        stdin.seek(0)
        request = {"args": list(args), "env": env, "cwd": str(cwd or os.getcwd())}
        status = _ZYGOTE.run(request, [stdin, stdout, stderr], timeout)
        out, err = (_read(f) for f in (stdout, stderr))
    command = [*HERMES, *args]
    if status is None:
        raise subprocess.TimeoutExpired(command, timeout, out, err)
    return subprocess.CompletedProcess(command, status, out, err)


def _read(file: IO[bytes]) -> str:
    """What the command wrote, as `text=True` reads it (universal newlines)."""
    file.seek(0)
    return file.read().decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


class _Zygote:
    """This test process's forking server (started at its first command, stopped at
    its exit; started again should it have died)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._path = ""

    def _ready(self) -> str:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                folder = tempfile.mkdtemp(prefix="hermes-zygote-")
                self._path = os.path.join(folder, "socket")
                env = dict(os.environ, COLUMNS="200", NO_COLOR="1")
                env.pop("HERMES_HOME", None)
                code = f"from tests.harness.zygote import main; main({self._path!r})"
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", code],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    env=env, cwd=Path(__file__).resolve().parents[2],
                )  # fmt: skip
                assert self._proc.stdout is not None
                line = self._proc.stdout.readline()
                assert line == b"ready\n", f"the command line's forking server said {line!r}"
                atexit.register(self._proc.kill)
            return self._path

    def spawn(self, request: dict[str, object], fds: list[int]) -> tuple[socket.socket, int]:
        """The command started: the connection its exit status will come on, its pid."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self._ready())
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
            pid = int(_line(conn))
        except BaseException:
            conn.close()
            raise
        return conn, pid

    def run(self, request: dict[str, object], files: list[IO[bytes]], timeout: float) -> int | None:
        """The command's exit status (None: killed at `timeout`)."""
        conn, pid = self.spawn(request, [f.fileno() for f in files])
        with conn:
            answers = conn.makefile("rb")
            conn.settimeout(timeout)
            try:
                return int(answers.readline())
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                conn.settimeout(10)
                answers.readline()
                return None


def _line(conn: socket.socket) -> bytes:
    """One line from `conn`, read a byte at a time (what follows stays unread)."""
    line = b""
    while not line.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte:
            raise ConnectionError("the forking server closed the connection")
        line += byte
    return line


_ZYGOTE = _Zygote()


class Forked:
    """`python SCRIPT ARGS` (`script` None: `hermes ARGS`) as a process of its own,
    forked from the command line's forking server (its imports done: starting is a tenth
    of a new interpreter's time), as `subprocess.Popen(..., stdout=PIPE, stderr=DEVNULL
    or PIPE, text=True)` would be: `stdout` (and with `stderr`, `stderr`) to read, `pid`,
    `send_signal`, `kill`, `poll`, `wait`. With `output` (a file descriptor, e.g. a log
    file's) it writes both there instead, as `stdout=log, stderr=STDOUT` would."""

    def __init__(
        self,
        script: str | None,
        *args: str,
        stderr: bool = False,
        env: dict[str, str] | None = None,
        output: int | None = None,
    ) -> None:
        null = os.open(os.devnull, os.O_RDWR)
        out, out_w = os.pipe() if output is None else (-1, output)
        err, err_w = os.pipe() if stderr and output is None else (-1, output or null)
        try:
            request: dict[str, object] = {
                "args": list(args), "env": dict(os.environ if env is None else env),
                "cwd": os.getcwd(),
            }  # fmt: skip
            if script is not None:
                request["script"] = script
            self._conn, self.pid = _ZYGOTE.spawn(request, [null, out_w, err_w])
        finally:
            os.close(null)
            for fd in {out_w, err_w} - {output, null}:
                os.close(fd)
        self.stdout = os.fdopen(out, "r") if out >= 0 else None
        self.stderr = os.fdopen(err, "r") if err >= 0 else None
        self.returncode: int | None = None

    def communicate(self) -> tuple[str, str]:
        """Everything it writes, once it has ended (its output is small: read in turn)."""
        with self:
            out = self.stdout.read() if self.stdout is not None else ""
            return out, self.stderr.read() if self.stderr is not None else ""

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        """Its exit status if it has ended, else None (without waiting)."""
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self.wait()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status, once it has ended; subprocess.TimeoutExpired after `timeout`."""
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                line = _line(self._conn)
            except TimeoutError:
                raise subprocess.TimeoutExpired([*HERMES], timeout or 0) from None
            self.returncode = int(line)
            self._conn.close()
        return self.returncode

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *_exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """A command (the chat unless told) in a pseudo-terminal, driven like a person at a
    keyboard."""

    def __init__(self, home: Path, *args: str, command: str = "chat") -> None:
        env = dict(os.environ, HERMES_HOME=str(home), COLUMNS="100", TERM="xterm", NO_COLOR="1")
        # pty.fork makes the terminal the child's controlling tty, so Ctrl-C is a real SIGINT
        self.pid, self.master = pty.fork()
        if self.pid == 0:  # the child
            os.execvpe(HERMES[0], [*HERMES, *command.split(), *args], env)
        self.seen = ""

    def expect(self, needle: str, timeout: float = 20, *, new: bool = False, after: int = 0) -> str:
        """Wait for `needle` on the screen (`new`: printed after this call began;
        `after`: past that position of the screen)."""
        deadline = time.monotonic() + timeout
        start = len(self.screen) if new else after
        while needle not in self.screen[start:]:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{needle!r} not seen; screen so far:\n{self.screen[-2000:]}"
            ready, _, _ = select.select([self.master], [], [], remaining)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the program closed its terminal: it has ended
                    raise AssertionError(
                        f"{needle!r} not seen: the program ended; screen:\n{self.screen[-2000:]}"
                    ) from None
        return self.screen

    def answered(self, reply: str) -> None:
        """Wait for a new `reply`, then for the prompt after it."""
        start = len(self.screen)
        self.expect(reply, new=True)
        self.expect("you ›", after=self.screen.index(reply, start) + len(reply))
        time.sleep(0.2)  # keys typed ahead in cooked mode are translated by the tty

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.seen)

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> int:
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    return os.waitstatus_to_exitcode(status)
                with contextlib.suppress(OSError):  # keep draining output so it can exit
                    if select.select([self.master], [], [], 0.1)[0]:
                        self.seen += os.read(self.master, 4096).decode(errors="replace")
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            return -9
        finally:
            os.close(self.master)
