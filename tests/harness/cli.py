"""Hermes on the command line, as tests drive it: `hermes(...)` runs one command in
a subprocess; `Terminal` runs one in a pseudo-terminal, driven like a person at a
keyboard (prompts, Ctrl-C)."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

HERMES = [sys.executable, "-c", "from gateway.cli.main import main; main()"]


def hermes(
    *args: str, home: Path | None = None, answer: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`hermes ARGS` as a subprocess; `answer` is typed on its stdin (else it has none)."""
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1")
    if home is not None:
        env["HERMES_HOME"] = str(home)
    return subprocess.run(
        [*HERMES, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
        input=answer if answer is not None else "",
    )


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
