"""`hermes chat` (interactive or `-q`)."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.markup import escape

from gateway.cli.chat_input import EXIT_ASKED, ChatInput, chat_input
from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import console, err_console, hermes_command, note, say
from gateway.status_file import read_status_file

if TYPE_CHECKING:  # imported by `chat` itself: the rest of the CLI starts without them
    import asyncio

    from gateway.app import App
    from gateway.edge.ports import LocalChat
    from hermes.agent.agent import Agent, Surface
    from hermes.agent.conversation import Conversation
    from hermes.llm.endpoint import Endpoint
    from hermes.state.db import SessionDB

T = TypeVar("T")
REMINDER_SWEEP_S = 5.0
CLI_NOTE = (
    "/exit  quit (also Ctrl-D)  ·  Ctrl-C cancels the running turn (at an empty prompt: "
    "leave)  ·  Alt-Enter new line  ·  Tab completes commands  ·  Up/Down history"
)
SETUP_HELP = """\
No model is configured. Hermes talks to any OpenAI-compatible endpoint: set one in
{config} (`{hermes} init` writes a starter file), for example:

  OpenAI      llm:
                base_url: https://api.openai.com/v1
                model: gpt-4o-mini
                api_key_env: OPENAI_API_KEY      # then: export OPENAI_API_KEY=sk-...
  OpenRouter  llm:
                base_url: https://openrouter.ai/api/v1
                model: openai/gpt-4o-mini
                api_key_env: OPENROUTER_API_KEY  # then: export OPENROUTER_API_KEY=...
  Ollama      llm:
                base_url: http://localhost:11434/v1
                model: llama3.1                  # no key needed
"""


class TurnCancelledError(Exception):
    pass


class Runtime:
    """An event loop in a background thread, so background work (memory review) keeps
    going while the terminal waits for input, and Ctrl-C can cancel just the turn."""

    def __init__(self) -> None:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        import asyncio
        import concurrent.futures

        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            with contextlib.suppress(concurrent.futures.CancelledError, Exception):
                future.result(timeout=5)  # let the turn unwind before the next prompt
            raise TurnCancelledError from None

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()


def _check_endpoint(ctx: CliContext) -> Endpoint:
    from gateway.config import CONFIG_FILENAME, main_endpoint

    endpoint = main_endpoint(ctx.config)
    if endpoint is None:
        shown = SETUP_HELP.format(config=ctx.home / CONFIG_FILENAME, hermes=hermes_command())
        err_console.print(shown, markup=False)
        raise typer.Exit(EXIT_USAGE)
    key_env = ctx.config.llm.api_key_env
    if key_env and not endpoint.api_key:
        fail(
            f"llm.api_key_env is {key_env!r}, but that environment variable is not set", EXIT_USAGE
        )
    return endpoint


def chat(
    query: Annotated[
        str | None, typer.Option("-q", "--query", help="Answer once and exit.")
    ] = None,
    resume: Annotated[
        str | None, typer.Option("--resume", help="Continue a session: its id, or 'latest'.")
    ] = None,
) -> None:
    """Chat with Hermes in the terminal, as the owner."""
    from gateway import registry
    from gateway.admission.session_key import session_key
    from gateway.app import build_app
    from hermes.identity import owner_user_id

    ctx = CliContext.load()
    hint = _model_hint(_check_endpoint(ctx))
    db = ctx.open_db()
    owner = owner_user_id(ctx.home)
    runtime = Runtime()
    app = build_app(ctx.home, ctx.config, db)
    app.commands.runtime = LocalInfo(ctx.home, app)
    agent = app.agent
    runtime.loop.call_soon_threadsafe(agent.check_memory, owner)  # a CLI-only install
    runtime.loop.call_soon_threadsafe(app.start_background)
    adapter = registry.local_chat()
    app.router.attach(adapter)
    sweeps = None
    try:
        key = session_key(adapter.event(""))
        surface = key  # the session key says where the message is: the terminal's DM
        conv = _conversation(agent, db, owner, resume, surface, str(key))
        app.router.pin(key, conv)
        runtime.run(adapter.start(app.router.handle))
        if query is not None:
            _one_shot(runtime, adapter, query, hint)
        else:
            if resume is not None:
                _recap(conv)
            names = [n for c in app.commands.table for n in (c.name, *c.aliases)]
            names += [f"{c.name} {s.name}" for c in app.commands.table for s in c.subcommands]
            reader = chat_input(ctx.home, [*names, "/exit", "/quit"])
            sweeps = runtime.run(_sweep_reminders(app, db, str(ctx.home)))
            _interactive(runtime, adapter, reader, conv.id, resumed=resume is not None, hint=hint)
            latest = db.conversations.latest_session(owner)
            again = f"{hermes_command()} chat --resume {latest.id if latest else conv.id}"
            note(f"[dim]resume with: {escape(again)}[/dim]")
    finally:
        if sweeps is not None:
            runtime.loop.call_soon_threadsafe(sweeps.cancel)
        runtime.run(_shutdown(app, owner))
        runtime.close()
        db.close()


async def _sweep_reminders(app: App, db: SessionDB, home: str) -> asyncio.Task[None]:
    """Reminders set in the terminal are delivered here while the chat is open (one
    missed while it was closed comes at the next start, marked late)."""
    import asyncio

    from gateway.reminders import ReminderRunner

    runner = ReminderRunner(db, app.router, app.agent, home=home)

    async def loop() -> None:
        while True:
            try:
                await runner.sweep()
            except Exception:  # a locked state.db, say: the next sweep tries again
                logging.getLogger(__name__).exception("reminder sweep failed")
            await asyncio.sleep(REMINDER_SWEEP_S)

    return asyncio.create_task(loop())


async def _shutdown(app: App, owner: str) -> None:
    await app.router.stop(timeout=30)
    await app.agent.drain(timeout=30)
    app.agent.check_memory(owner)  # and once more at the end of the session
    await app.close()


def _conversation(
    agent: Agent, db: SessionDB, owner: str, resume: str | None, surface: Surface, key: str
) -> Conversation:
    if resume is None:
        return agent.sessions.open(owner, surface, key)
    session = (
        db.conversations.latest_session(owner)
        if resume == "latest"
        else db.conversations.get_session(resume, owner)
    )
    conv = agent.sessions.resume(owner, session.id) if session else None
    if conv is None:
        fail(f"no session {resume!r} to resume", EXIT_REFUSED)
    return conv


def _one_shot(runtime: Runtime, adapter: LocalChat, query: str, hint: str) -> None:
    try:
        answer = runtime.run(adapter.ask(query))
    except TurnCancelledError:
        raise typer.Exit(130) from None
    if answer.failed:
        fail(f"{answer.text} {hint}", EXIT_REFUSED)
    for notice in adapter.take_notices():  # what came during the turn: a file saved
        say(notice)
    say(answer.text)


def _model_hint(endpoint: Endpoint) -> str:
    """Which model a failed answer came from, and the command that checks it."""
    return f"(model {endpoint.model} at {endpoint.base_url}; `{hermes_command()} doctor` checks it)"


def _interactive(
    runtime: Runtime,
    adapter: LocalChat,
    reader: ChatInput,
    session_id: str,
    resumed: bool,
    *,
    hint: str,
) -> None:
    """Read messages; each goes through the router (commands too) and its answer is shown."""
    from rich.markdown import Markdown

    from gateway.commands.table import command_name

    def show_now(text: str) -> bool:  # a reminder while the prompt waits: above it, now
        return reader.show(lambda: console.print(Markdown(text)))

    adapter.on_notice = show_now
    state = "resumed" if resumed else "new"
    note(f"[bold]Hermes[/bold] · session {session_id} ({state}) · /help for commands")
    while True:
        for waiting in adapter.take_notices():  # reminders that came during a turn
            console.print(Markdown(waiting))
        line = _next_message(reader)
        if line is None:
            note("[dim]bye[/dim]")
            return
        if not line:
            continue
        name = command_name(line) if line.startswith("/") else ""
        if name in ("/exit", "/quit"):
            return
        try:
            if name:
                answer = runtime.run(adapter.ask(line))
            else:
                with LiveReply() as live:  # the reply as it is written, then printed whole
                    answer = runtime.run(adapter.ask(line, on_partial=live.update))
        except TurnCancelledError:
            note("[yellow](cancelled; your message is saved in this session)[/yellow]")
            continue
        if answer.failed:
            note(f"[red]{escape(answer.text)}[/red] [dim]{escape(hint)}[/dim]")
        else:  # a command's reply is lines: keep its line breaks
            shown = hard_breaks(answer.text) if name else answer.text
            console.print(Markdown(shown or "(no answer)"))
        if name == "/help":
            note(f"[dim]{CLI_NOTE}[/dim]")


class LiveReply:
    """A spinner until the reply's first words, then the Markdown so far, redrawn in
    place (rich Live, cleared at the end: the finished reply is printed normally, so a
    long one scrolls like any output). `update` may be called from another thread."""

    def __init__(self) -> None:
        from rich.live import Live
        from rich.spinner import Spinner

        self._live = Live(
            Spinner("dots", "thinking…"),
            console=console,
            transient=True,
            refresh_per_second=8,
            vertical_overflow="crop",
        )

    def update(self, text: str) -> None:
        from rich.markdown import Markdown

        lines = text.splitlines()
        room = max(5, console.height - 3)
        if len(lines) > room:  # a long reply: its end, where the writing is
            text = "…\n" + "\n".join(lines[-room:])
        self._live.update(Markdown(text))

    def __enter__(self) -> LiveReply:
        self._live.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._live.stop()


def _next_message(reader: ChatInput) -> str | None:
    """The next message, stripped ('' for none); None when the person leaves (Ctrl-D, or
    Ctrl-C at an empty prompt, confirmed)."""
    try:
        text = reader.read()
    except KeyboardInterrupt:  # a Ctrl-C between two prompts: as at an empty prompt
        text = EXIT_ASKED
    if text == EXIT_ASKED:
        return None if reader.confirm_exit() else ""
    return None if text is None else text.strip()


def hard_breaks(text: str) -> str:
    """Markdown that keeps every line break (a lone newline joins lines otherwise)."""
    return re.sub(r"(?<!\n)\n(?!\n)", "  \n", text)


def _recap(conv: Conversation, turns: int = 3) -> None:
    """The last turns of a resumed session, clipped."""
    said = [m for m in conv.history if m.get("role") in ("user", "assistant") and m.get("content")]
    if not said:
        return
    note("[dim]Last in this session:[/dim]")
    for message in said[-2 * turns :]:
        who = "you" if message["role"] == "user" else "hermes"
        text = " ".join(str(message["content"]).split())
        note(f"[dim]{who}: {escape(text[:200] + ('…' if len(text) > 200 else ''))}[/dim]")


class LocalInfo:
    """/admin status from the terminal: the gateway's status file, and our own model."""

    def __init__(self, home: Path, app: App) -> None:
        self.status = read_status_file(home)
        self.app = app

    def uptime_s(self) -> float | None:
        if self.status is None or not self.status.running:
            return None
        return (datetime.now(UTC) - self.status.started_at).total_seconds()

    def adapter_states(self) -> dict[str, str]:
        return self.status.platforms if self.status and self.status.running else {}

    async def llm_health(self) -> str:
        return await self.app.health()

    def dashboard_url(self) -> str | None:
        """The running gateway's dashboard (it serves one unless config refuses it)."""
        from gateway.config import dashboard_address, dashboard_refusal

        if self.status is None or not self.status.running:
            return None
        if dashboard_refusal(self.app.config) is not None:
            return None
        return dashboard_address(self.app.config, self.status.http)


__all__ = ["chat"]
