"""The terminal chat's input: prompt_toolkit on a terminal, plain lines otherwise.

On a terminal: history in `$HERMES_HOME/chat_history` (0600) with Up/Down and Ctrl-R,
line editing, multi-line input (a paste is one message, newlines and all; Alt-Enter,
or Esc then Enter, starts a new line; Enter sends), completion of slash commands with
Tab, and Ctrl-C: with text typed it clears the line, at an empty prompt it asks before
exiting (Ctrl-D exits at once). Without a terminal (piped input), one line per message.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gateway.cli.output import console

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import CompleteEvent, Completer, Completion
    from prompt_toolkit.document import Document
    from prompt_toolkit.input import Input
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.output import Output

HISTORY_FILE = "chat_history"
PROMPT = "you › "
EXIT_ASKED = "\x00exit?"  # what read() returns when Ctrl-C was pressed at an empty prompt


class ChatInput(Protocol):
    def show(self, render: Callable[[], None]) -> bool:
        """Print something that came by itself (a reminder) while the prompt waits."""

    def read(self) -> str | None:
        """The next message (None: the person wants to leave)."""

    def confirm_exit(self) -> bool:
        """Ask whether to leave (Ctrl-C at an empty prompt)."""


class PlainInput:
    """Piped or redirected input: one line per message."""

    def show(self, render: Callable[[], None]) -> bool:
        return False  # nothing to print around: shown before the next line is read

    def read(self) -> str | None:
        try:
            return console.input(f"[bold cyan]{PROMPT}[/bold cyan]")
        except (EOFError, KeyboardInterrupt):
            return None

    def confirm_exit(self) -> bool:
        return True


class TerminalInput:
    """prompt_toolkit: history, editing, multi-line, completion of commands."""

    def __init__(
        self,
        home: Path,
        commands: Sequence[str],
        *,
        input: Input | None = None,
        output: Output | None = None,
    ) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory

        self.session: PromptSession[str] = PromptSession(
            history=FileHistory(str(private_file(home / HISTORY_FILE))),
            multiline=False,  # Enter sends; a paste and Alt-Enter still give new lines
            key_bindings=_bindings(),
            completer=_slash_completer(commands),
            complete_while_typing=False,
            enable_history_search=False,
            input=input,
            output=output,
        )

    def read(self) -> str | None:
        try:
            return self.session.prompt(PROMPT)
        except EOFError:
            return None
        except KeyboardInterrupt:
            return EXIT_ASKED

    def show(self, render: Callable[[], None]) -> bool:
        """Print above the prompt now, from any thread (`render` prints); False when no
        prompt is being shown (the caller shows it after the running turn)."""
        from prompt_toolkit.application import run_in_terminal

        app = self.session.app
        loop = getattr(app, "loop", None)
        if not app.is_running or loop is None:
            return False
        loop.call_soon_threadsafe(run_in_terminal, render)
        return True

    def confirm_exit(self) -> bool:
        try:
            answer = self.session.prompt("Leave the chat? [y/N] ", multiline=False)
        except (EOFError, KeyboardInterrupt):
            return True
        return answer.strip().casefold() in ("y", "yes")


def chat_input(home: Path, commands: Sequence[str]) -> ChatInput:
    """TerminalInput on a terminal, PlainInput otherwise."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return PlainInput()
    from prompt_toolkit.output import create_output

    output = create_output()
    # no cursor-position request: a terminal that does not answer it would hold every
    # prompt's return for a moment, and a Ctrl-C typed then would be read as input
    # instead of cancelling the turn it was meant for
    output.enable_cpr = False  # type: ignore[attr-defined]
    return TerminalInput(home, commands, output=output)


def private_file(path: Path) -> Path:
    """`path`, created owner-only if missing (the history holds what was typed)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
    os.close(fd)
    path.chmod(0o600)
    return path


def _bindings() -> KeyBindings:
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

    keys = KeyBindings()

    @keys.add("escape", "enter")  # Alt-Enter (terminals send Esc, Enter)
    @keys.add("escape", "c-j")  # the same typed ahead, while the tty translated it
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()  # a line typed by mistake: gone, the chat stays
        else:
            event.app.exit(exception=KeyboardInterrupt())

    return keys


def _slash_completer(commands: Iterable[str]) -> Completer:
    """Completes the command names when the message starts with '/', and a command's
    subcommands after it ('/memory sh' -> '/memory show': `commands` holds both)."""
    from prompt_toolkit.completion import Completer, Completion

    names = sorted(set(commands))

    class SlashCompleter(Completer):
        def get_completions(
            self, document: Document, complete_event: CompleteEvent
        ) -> Iterator[Completion]:
            text = document.text_before_cursor
            if not text.startswith("/") or "\n" in text:
                return
            for name in names:
                if name.startswith(text):
                    yield Completion(name, start_position=-len(text))

    return SlashCompleter()


__all__ = ["EXIT_ASKED", "HISTORY_FILE", "ChatInput", "PlainInput", "TerminalInput", "chat_input"]
