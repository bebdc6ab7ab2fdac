"""`hermes init` and `hermes init --gateway`: flags (or defaults without a terminal)
become a commented config that loads; mistakes are caught before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import load_config
from tests.harness.cli import Terminal, hermes

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1"


def test_gateway_setup_from_flags_writes_a_config_that_loads(home: Path) -> None:
    done = hermes(
        "init",
        "--gateway",
        "--base-url",
        "http://127.0.0.1:11434/v1",
        "--model",
        "llama3.1",
        "--api-key-env",
        "",
        "-p",
        "telegram",
        "--platform",
        "slack,discord",
        "--allow",
        "telegram:12345",
        "--allow",
        "slack:U0123",
        "--mode",
        "slack=http",
        "--log-format",
        "json",
        home=home,
    )
    assert done.returncode == 0, done.stderr
    path = home / "config.yaml"
    assert path.stat().st_mode & 0o777 == 0o600
    config = load_config(home)
    assert config.llm.base_url == "http://127.0.0.1:11434/v1" and config.llm.api_key_env is None
    assert config.platforms.telegram.enabled and config.platforms.telegram.allowed_users == [
        "12345"
    ]
    assert config.platforms.slack.mode == "http" and config.platforms.slack.allowed_users == [
        "U0123"
    ]
    assert config.platforms.discord.enabled and config.logging.format == "json"
    assert not config.access.allow_all
    assert "SLACK_SIGNING_SECRET" in done.stdout and "hermes doctor" in done.stdout
    assert "# " in path.read_text()  # commented


def test_tokens_are_never_written_and_mistakes_write_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)  # set in the shell init runs in
    done = hermes(
        "init", "--gateway", "-p", "telegram", "--api-key-env", "OPENAI_API_KEY", home=home
    )
    assert done.returncode == 0 and TOKEN not in (home / "config.yaml").read_text()
    assert "TELEGRAM_BOT_TOKEN" not in done.stdout.split("Set in")[-1]  # it is set
    for args, said in (
        (["--base-url", "ftp://example.com"], "not an http(s) URL"),
        (["--api-key-env", "sk-abc123"], "give the NAME"),
        (["--gateway", "-p", "telegrm"], "unknown platform 'telegrm'"),
        (["--gateway", "-p", "telegram", "--allow", "12345"], "expected PLATFORM:ID"),
        (["--gateway", "-p", "telegram", "--allow", "slack:U1"], "slack is not being set up"),
        (["--gateway", "-p", "telegram", "--mode", "telegram=webhook"], "https URL"),
        (["--gateway", "-p", "slack", "--mode", "slack=rtm"], "socket or http"),
        (["--gateway", "-p", "slack", "--mode", "discord=x"], "discord is not being set up"),
        (["--gateway", "-p", "slack", "--mode", "http"], "expected PLATFORM=MODE"),
        (["--gateway", "-p", "slack", "--webhook-url", "https://x.example"], "webhook mode"),
    ):
        fresh = home.parent / f"fresh-{len(said)}"
        failed = hermes("init", *args, home=fresh)
        assert failed.returncode == 2 and said in failed.stderr, (args, failed.stderr)
        assert not (fresh / "config.yaml").exists() and "Traceback" not in failed.stderr
    again = hermes("init", home=home)
    assert again.returncode == 1 and "--force" in again.stderr
    assert hermes("init", "--force", "--model", "m2", home=home).returncode == 0
    assert load_config(home).llm.model == "m2"


def test_on_a_terminal_init_asks_names_problems_as_asked_and_lets_the_owner_in(
    home: Path,
) -> None:
    """A person at a terminal: every question answered (the key's variable with '' for
    none), then their own account; a wrong answer is named by its question, never by
    a flag they did not type; the next steps say how others get in."""
    term = Terminal(home, "--gateway", command="init")
    for question, answer in (
        ("Model endpoint", ""),
        ("Model name", ""),
        ("API key", "''"),
        ("search the web", "admins"),
        ("Platforms", "telegram"),
        ("Let yourself in on telegram", "12345"),
    ):
        term.expect(question)
        term.send(answer + "\n")
    term.expect("hermes pairing approve")
    assert term.close() == 0, term.screen
    config = load_config(home)
    assert config.llm.api_key_env is None
    assert config.platforms.telegram.allowed_users == ["12345"]
    assert config.tools == {"web": ["admin"]}  # the operator's answer

    wrong = Terminal(home.parent / "second", command="init")
    for question, answer in (
        ("Model endpoint", ""),
        ("Model name", ""),
        ("API key", "sk-123"),
        ("search the web", ""),
    ):
        wrong.expect(question)
        wrong.send(answer + "\n")
    wrong.expect("nothing was written")
    assert wrong.close() == 2
    said = " ".join(wrong.screen.split())
    assert "the API key's variable 'sk-123' is not a variable name" in said
    assert "--api-key-env" not in said


def test_none_means_no_key_as_the_flag_and_the_question_say(home: Path) -> None:
    """`--api-key-env none` (the help's word) and 'none' typed at the question both write
    a model without a key; the help and the question name it the same way."""
    from tests.harness.cli import hermes

    done = hermes("init", "--base-url", "http://127.0.0.1:11434/v1", "--model", "m",
                  "--api-key-env", "none")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "api_key_env: null" in (home / "config.yaml").read_text()
    shown = hermes("init", "--help").stdout
    assert "'none' for a model without one" in " ".join(shown.split()).replace("│ ", "")


def test_matrix_and_mattermost_accounts_are_taken_as_each_platform_spells_them(
    home: Path,
) -> None:
    """A Matrix id has colons ("@you:example.org"), a Mattermost id 26 letters."""
    done = hermes(
        "init", "--gateway", "--base-url", "http://127.0.0.1:11434/v1", "--model", "m",
        "--api-key-env", "", "-p", "matrix,mattermost",
        "--allow", "matrix:@you:example.org", "--allow", "mattermost:a1b2c3d4e5f6g7h8i9j0k1l2m3",
        home=home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = load_config(home)
    assert config.platforms.matrix.allowed_users == ["@you:example.org"]
    assert config.platforms.matrix.user_id.startswith("@") and config.platforms.matrix.homeserver
    assert config.platforms.mattermost.allowed_users == ["a1b2c3d4e5f6g7h8i9j0k1l2m3"]
    assert "MATRIX_ACCESS_TOKEN" in done.stdout and "MATTERMOST_TOKEN" in done.stdout
    spaced = hermes(
        "init", "--gateway", "--force", "--base-url", "http://127.0.0.1:11434/v1", "--model", "m",
        "--api-key-env", "", "-p", "matrix", "--allow", "matrix:@a b:x", home=home,
    )  # fmt: skip
    assert spaced.returncode != 0 and "expected PLATFORM:ID" in spaced.stderr, spaced.stderr
