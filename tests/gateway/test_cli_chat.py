"""`hermes chat` as a real subprocess: one-shot, interactive through a pseudo-terminal."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from hermes.identity import owner_user_id
from hermes.state.db import SessionDB
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.harness.cli import Terminal, hermes


def configure(home: Path, fake: FakeOpenAI, key_env: str | None = None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    key = f"\n  api_key_env: {key_env}" if key_env else ""
    (home / "config.yaml").write_text(
        f"llm:\n  base_url: {fake.base_url}\n  model: fake-main\n  max_retries: 0\n"
        f"  timeout: 5{key}\nmemory:\n  review_interval: 0\n"
    )


def test_no_model_configured_explains_what_to_set(home: Path) -> None:
    result = hermes("chat", "-q", "hello")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    for needle in (
        "api.openai.com/v1",
        "openrouter.ai/api/v1",
        "localhost:11434/v1",
        "hermes init",
    ):
        assert needle in result.stderr


def test_init_writes_a_starter_config_once(home: Path) -> None:
    assert (
        hermes(
            "init",
            "--base-url",
            "http://127.0.0.1:11434/v1",
            "--model",
            "llama3.1",
            "--api-key-env",
            "",
        ).returncode
        == 0
    )
    text = (home / "config.yaml").read_text()
    assert "llama3.1" in text and (home / "config.yaml").stat().st_mode & 0o777 == 0o600
    assert hermes("init").returncode == 1
    assert hermes("init", "--force").returncode == 0


def test_missing_key_variable_is_named(home: Path, fake_llm: FakeOpenAI) -> None:
    configure(home, fake_llm, key_env="HERMES_TEST_MISSING_KEY")
    result = hermes("chat", "-q", "hi")
    assert result.returncode == 2 and "HERMES_TEST_MISSING_KEY" in result.stderr


def test_one_shot_answers_on_stdout_and_resumes(home: Path, fake_llm: FakeOpenAI) -> None:
    configure(home, fake_llm)
    fake_llm.push(Reply(text="Paris."), Reply(text="About 2.1 million."))
    first = hermes("chat", "-q", "Capital of France?")
    assert first.returncode == 0 and first.stdout == "Paris.\n"
    second = hermes("chat", "-q", "Population?", "--resume", "latest")
    assert second.stdout == "About 2.1 million.\n"
    history = [m["content"] for m in fake_llm.requests[1]["messages"][1:]]
    assert history[0] == "Capital of France?" and history[1] == "Paris."
    db = SessionDB.open(home)
    sessions = db.conversations.list_sessions(owner_user_id(home))
    assert len(sessions) == 1 and sessions[0].message_count == 4
    db.close()


def test_a_file_the_assistant_sends_is_saved_where_the_chat_was_started(
    home: Path, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    """`hermes chat` in a folder: the file lands there (next to one of the same name,
    never over it), and the line saying where comes before the answer."""
    configure(home, fake_llm)
    here = tmp_path / "work"
    here.mkdir()
    (here / "plan.md").write_text("mine")
    call = {"name": "plan.md", "content": "# Plan\n- rest\n"}
    fake_llm.push(Reply.tool_call("send_file", call), Reply(text="Saved your plan."))
    done = hermes("chat", "-q", "write my plan to a file", cwd=here)
    assert done.returncode == 0, done.stderr
    saved = here / "plan (1).md"
    assert done.stdout == f"📎 Saved plan.md to {saved}\nSaved your plan.\n"
    assert saved.read_text() == "# Plan\n- rest\n" and (here / "plan.md").read_text() == "mine"


def test_one_shot_failure_exits_non_zero_and_keeps_the_message(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    configure(home, fake_llm)
    fake_llm.default = Reply(status=500)
    result = hermes("chat", "-q", "are you up?")
    assert result.returncode == 1 and "Your message was saved" in result.stderr
    found = json.loads(hermes("sessions", "search", "are you up", "--json").stdout)
    assert found["count"] == 1


def test_resume_of_unknown_session_fails_cleanly(home: Path, fake_llm: FakeOpenAI) -> None:
    configure(home, fake_llm)
    result = hermes("chat", "-q", "x", "--resume", "s_0000000000000000")
    assert result.returncode == 1 and "no session" in result.stderr


def test_interactive_chat_with_cancel_and_commands(home: Path, fake_llm: FakeOpenAI) -> None:
    configure(home, fake_llm)

    def responder(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]["content"]
        if request["messages"][-1]["role"] == "tool":
            return Reply(text="Saved it.")
        if last.startswith("slow question"):
            return Reply(text="too late", delay=8)
        if last.startswith("remember"):
            return Reply.tool_call(
                "memory", {"action": "add", "target": "user", "content": "Likes **bold** tea"}
            )
        return Reply(text="**Hello** from the fake model")

    fake_llm.responder = responder
    term = Terminal(home)
    try:
        term.expect("you ›")
        term.send("hi there\r")
        term.expect("Hello from the fake model")  # markdown rendered: no asterisks
        assert "**Hello**" not in term.screen
        term.send("slow question\r")
        term.expect("thinking", new=True)
        time.sleep(0.5)
        term.send("\x03")  # Ctrl-C cancels the turn, not the chat
        term.expect("cancelled")
        term.send("remember I like tea\r")
        term.expect("Saved it.")
        term.send("/memory\r")
        term.expect("entries")  # the shared /memory status
        term.send("/memory show user\r")
        term.expect("Likes bold tea")  # Markdown, rendered
        term.send("/new\r")
        term.expect("Started a fresh conversation")
        term.send("and now?\r")  # the next message opens the new session
        term.expect("Hello from the fake model")
        term.send("/exit\r")
        assert term.close() == 0
    except BaseException:
        term.close()
        raise
    db = SessionDB.open(home)
    sessions = db.conversations.list_sessions(owner_user_id(home))
    assert len(sessions) == 2 and sessions[1].end_reason == "user_reset"
    contents = [m.content for m in db.conversations.messages(sessions[1].id, owner_user_id(home))]
    assert "slow question" in contents  # the cancelled turn's message was kept
    db.close()


@pytest.mark.slow
def test_a_reply_over_a_million_characters_is_shown_whole(home: Path, fake_llm: FakeOpenAI) -> None:
    configure(home, fake_llm)
    long = "\n".join(f"line {n}: " + "x" * 90 for n in range(12_000))  # ~1.2 M characters
    assert len(long) > 1_000_000
    # streamed in pieces of 4,000 characters, as a fast endpoint sends them (pieces of 12,
    # the fake's default, are 100,000 chunks each parsed by the openai SDK: 20 s of CPU)
    pieces = [long[n : n + 4000] for n in range(0, len(long), 4000)]
    fake_llm.default = Reply(text=long, pieces=pieces)
    result = hermes("chat", "-q", "write a lot", timeout=240)
    assert result.returncode == 0
    assert result.stdout == long + "\n"


def asked(fake: FakeOpenAI) -> list[str]:
    """The user messages the model was sent, one per turn."""
    return [str(r["messages"][-1]["content"]).split("\n\n[context")[0] for r in fake.requests]


def test_line_editing_history_multiline_completion_and_leaving(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    configure(home, fake_llm)
    fake_llm.default = Reply(text="Got it.")
    term = Terminal(home)
    try:
        term.expect("you ›")
        term.send("first message\r")
        term.answered("Got it.")
        term.send("\x1b[A")  # Up: the previous message, not ^[[A
        term.expect("first message", new=True)
        term.send("\r")
        term.answered("Got it.")
        # a paste of three lines is one message; Alt-Enter starts a new line
        term.send("\x1b[200~line one\nline two\nline three\x1b[201~\r")
        term.answered("Got it.")
        term.send("left\x1b\rright\r")
        term.answered("Got it.")
        term.send("typed by mistake\x03")  # Ctrl-C with text: the line is cleared
        term.send("kept\r")
        term.answered("Got it.")
        term.send("/he\t\r")  # Tab completes the command
        term.expect("/whoami", new=True)
        # the prompt again before Ctrl-C: typed earlier, the tty (not the prompt) would
        # take it as an interrupt of the running command
        term.expect("you ›", after=term.screen.rindex("/whoami"))
        time.sleep(0.2)  # as in Terminal.answered: the prompt takes over the keys
        help_text = term.screen[term.screen.rindex("/help") :]
        assert not re.search(r"/whoami[^\n]*/new", help_text)  # one command per line
        term.send("\x03")  # Ctrl-C at an empty prompt asks first
        term.expect("Leave the chat? [y/N]", new=True)
        term.send("n\r")
        term.expect("you ›", after=term.screen.rindex("Leave the chat?"))
        time.sleep(0.3)  # the prompt reads raw keys (a ^C before it is a plain SIGINT)
        term.send("\x03")
        term.expect("Leave the chat?", new=True)
        term.send("y\r")
        term.expect("resume with: hermes chat --resume s_", new=True)
        assert term.close() == 0
    except BaseException:
        term.close()
        raise
    assert asked(fake_llm) == [
        "first message",
        "first message",
        "line one\nline two\nline three",
        "left\nright",
        "kept",
    ]
    history = home / "chat_history"
    assert oct(history.stat().st_mode & 0o777) == "0o600"
    assert "line two" in history.read_text()
    recap = Terminal(home, "--resume", "latest")
    try:
        recap.expect("Last in this session:")
        recap.expect("you: kept")
        recap.expect("you ›")
        time.sleep(0.5)  # a ^D before the prompt reads raw keys is the tty's own EOF
        recap.send("\x04")  # Ctrl-D leaves at once
        recap.expect("resume with: hermes chat --resume s_")
        assert recap.close() == 0
    except BaseException:
        recap.close()
        raise


def test_a_reply_is_shown_as_it_is_written(home: Path, fake_llm: FakeOpenAI) -> None:
    """The first words are on the screen while the model is still writing the rest."""
    configure(home, fake_llm)
    words = [f"word{n} " for n in range(30)]
    fake_llm.push(Reply(text="".join(words).strip(), pieces=words, piece_delay=0.15))
    term = Terminal(home)
    try:
        term.expect("you ›")
        term.send("talk to me\r")
        term.expect("word3", new=True)
        assert "word29" not in term.screen  # the rest is still being written (4.5 s in all)
        term.answered("word29")
        term.send("/exit\r")
        assert term.close() == 0
    except BaseException:
        print(term.screen[-3000:])
        term.close()
        raise


def test_a_reminder_set_in_the_terminal_shows_above_the_waiting_prompt(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    configure(home, fake_llm)
    fake_llm.push(
        Reply.tool_call(
            "schedule", {"action": "add", "message": "stretch now", "when": "in 2 seconds"}
        ),
        Reply(text="Okay, in two seconds."),
    )
    term = Terminal(home)
    try:
        term.expect("you ›")
        term.send("remind me in 2 seconds to stretch\r")
        term.answered("Okay, in two seconds.")
        term.expect("Reminder: stretch now", new=True, timeout=15)  # no key pressed
        term.send("/reminders\r")
        term.expect("no reminders", new=True)  # it ran: nothing left
        term.send("/exit\r")
        assert term.close() == 0
    except BaseException:
        print(term.screen[-3000:])
        term.close()
        raise


def test_hints_name_the_command_as_it_was_run_and_the_model_that_failed(tmp_path: Path) -> None:
    """After `make chat`, `hermes` is not on PATH: every hint names the program as it was
    started; a model that cannot be reached is named with its URL and `doctor`."""
    import os
    import socket
    import subprocess
    import sys

    script = Path(sys.executable).parent / "hermes"  # the console script make installs
    env = dict(os.environ, PATH="/usr/bin:/bin", NO_COLOR="1", COLUMNS="200")
    home = tmp_path / "home"
    home.mkdir()
    bare = subprocess.run(
        [str(script), "chat"],
        env={**env, "HERMES_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bare.returncode == 2 and f"`{script} init` writes a starter file" in bare.stderr
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
        (home / "config.yaml").write_text(
            f"llm:\n  base_url: {url}\n  model: m1\n  api_key_env: null\n  max_retries: 0\n"
        )
        failed = subprocess.run(
            [str(script), "chat", "-q", "hi"],
            env={**env, "HERMES_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    said = " ".join(failed.stderr.split())
    assert failed.returncode == 1 and f"model m1 at {url}" in said, said
    assert f"`{script} doctor` checks it" in said and "Traceback" not in failed.stderr


def test_the_chat_completes_commands_and_their_subcommands() -> None:
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    from gateway.cli.chat_input import _slash_completer

    completer = _slash_completer(["/memory", "/memory show", "/memory why", "/new", "/help"])

    def offered(text: str) -> list[str]:
        found = completer.get_completions(Document(text), CompleteEvent())
        return [c.text for c in found]

    assert offered("/me") == ["/memory", "/memory show", "/memory why"]
    assert offered("/memory s") == ["/memory show"]
    assert offered("/memory why x") == [] and offered("hello /m") == []


def test_new_starts_a_fresh_session_with_the_memory_saved_since(
    home: Path, fake_llm: FakeOpenAI
) -> None:
    """A chat left without /new keeps its session open; the next chat's /new must not
    fall back to that older session (its prompt frozen before today's memory), but start
    a new one whose snapshot holds what was saved since."""
    configure(home, fake_llm)
    fake_llm.default = Reply(text="ok")
    assert hermes("chat", answer="hello\n").returncode == 0  # left open
    saved = hermes("memory", "add", "--target", "user", "Drinks green tea, never coffee")
    assert saved.returncode == 0, saved.stderr
    assert hermes("chat", answer="/new\nwhat do I drink?\n").returncode == 0
    last = fake_llm.requests[-1]["messages"]
    assert "green tea" in last[0]["content"]  # the frozen prompt of a new session
    (asked,) = last[1:]  # nothing of the older session's history
    assert asked["content"].startswith("what do I drink?")
    db = SessionDB.open(home)
    sessions = db.conversations.list_sessions(owner_user_id(home))
    db.close()
    latest = sessions[0]
    assert latest.ended_at is None and latest.message_count == 2
