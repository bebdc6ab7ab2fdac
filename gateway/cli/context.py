"""What every command needs, resolved once: the home folder and its config."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from gateway.cli.output import err_console
from gateway.edge.platforms import TERMINAL

if TYPE_CHECKING:  # the heavy modules are imported by the commands that use them, so
    # `hermes --help` and the memory commands start fast (bench/cold_start.py)
    from collections.abc import AsyncIterator, Callable

    from gateway.admission.people import People
    from gateway.config import HermesConfig
    from hermes.llm.client import LLMClient
    from hermes.llm.reranker import LLMReranker
    from hermes.memory.service import MemoryService
    from hermes.state.db import SessionDB
    from hermes.tools.session_search import Summarizer, SummaryPolicy

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
# a dependency is not there yet (the database server at boot): sysexits' EX_TEMPFAIL,
# which the systemd units restart (2, a configuration error, they do not)
EXIT_UNAVAILABLE = 75
# state.db up to this size is checked (PRAGMA quick_check) by every command that opens
# it: pages overwritten inside a valid file are found before anything reads or writes
# them (about 10 ms per 10 MB); a larger one is checked by doctor and the gateway's start
QUICK_CHECK_MAX_BYTES = 64 * 1024 * 1024
CLI_PLATFORM, CLI_USER = TERMINAL, "local"  # the owner's identity on the terminal


@dataclass(frozen=True, slots=True)
class CliContext:
    home: Path
    config: HermesConfig

    @classmethod
    def load(cls, *, reading: bool = False) -> CliContext:
        """The home and its config. `reading`: a command that only shows what is there,
        which never creates a home that does not exist (it says where it looked)."""
        from gateway.config import ConfigError, load_config

        home = CliContext.home_only(reading=reading)
        try:
            return cls(home, load_config(home))
        except ConfigError as exc:
            fail(str(exc), EXIT_USAGE)

    @staticmethod
    def home_only(*, reading: bool = False) -> Path:
        """The home folder, for commands that must work before a config exists."""
        from gateway.config import resolve_home

        home = resolve_home()
        if reading and not home.exists():
            fail(
                f"there is no Hermes home at {home} (HERMES_HOME): nothing to show. Is "
                "HERMES_HOME right? (`hermes init` makes a new home.)",
                EXIT_USAGE,
            )
        check_owner(home)
        return home

    def open_db(self, patience: float = 0.0) -> SessionDB:
        """state.db, with the owner registered as a user. `patience`: how long a database
        server that is not there yet (a boot where PostgreSQL comes up after the gateway)
        is waited for; past it, EXIT_UNAVAILABLE, which a service manager restarts."""
        from gateway.config import ConfigError, open_state
        from hermes.identity import owner_user_id
        from hermes.state.engine import StateDBError
        from hermes.state.retry import DatabaseUnavailableError

        try:
            db = _waiting(lambda: open_state(self.home, self.config), patience)
            _check_damage(db)
            # a shared database's owner is every home's owner (each gateway of several
            # has a home of its own): adopted by a home that has none yet
            known = db.people.user_by_identity(CLI_PLATFORM, CLI_USER)
            owner = owner_user_id(self.home, adopt=known)
            db.people.ensure_user(owner, role="owner", display_name="owner")
            db.people.ensure_identity(CLI_PLATFORM, CLI_USER, owner)
        except DatabaseUnavailableError as exc:
            waited = f" (still not there after {patience:g} s)" if patience else ""
            fail(f"{exc}{waited}", EXIT_UNAVAILABLE)
        except (StateDBError, ConfigError) as exc:  # damaged, unreachable or full: unchanged
            fail(str(exc), EXIT_USAGE)
        return db

    def memory(self, db: SessionDB, model: LLMClient | None = None) -> MemoryService:
        """The memory service (the one write path); `model` consolidates."""
        from gateway.app import build_memory

        return build_memory(self.home, self.config, db, model)

    @contextlib.asynccontextmanager
    async def memory_at_work(
        self, db: SessionDB, model: LLMClient | None = None
    ) -> AsyncIterator[MemoryService]:
        """The memory service for a command's writes; at the end its provider calls
        are waited for and its clients closed (`MemoryService.close`), and `model`."""
        service = self.memory(db, model)
        try:
            yield service
        finally:
            try:
                await service.close()
            finally:
                if model is not None:
                    await model.close()

    def people(self, db: SessionDB) -> People:
        """Who is who, linking included (merges go through the memory service)."""
        from gateway.admission.people import People

        return People(self.config, db, self.memory(db))

    def summarizer(self) -> Summarizer | None:
        """The model for search summaries (the session_search side task), if any."""
        from gateway.app import side_model
        from gateway.config import SideTask
        from hermes.llm.summarizer import LLMSummarizer

        model = side_model(self.config, SideTask.SESSION_SEARCH)
        return LLMSummarizer(model) if model is not None else None

    def auxiliary_model(self, db: SessionDB) -> LLMClient | None:
        """The model for memory's side tasks (consolidation, the guard's judge), chosen
        as the gateway chooses it (gateway.app.side_model), its tokens counted in `db`
        for the person they were spent for."""
        from gateway.app import side_model
        from gateway.config import SideTask

        return side_model(self.config, SideTask.MEMORY, db=db)

    def summary_policy(self) -> SummaryPolicy:
        from gateway.app import search_policy

        return search_policy(self.config)

    def reranker(self) -> LLMReranker | None:
        """The model that reorders search candidates (search.rerank), if it is on."""
        from gateway.app import side_model
        from gateway.config import SideTask
        from hermes.llm.reranker import LLMReranker

        if not self.config.search.rerank.enabled:
            return None
        model = side_model(self.config, SideTask.SESSION_SEARCH)
        return LLMReranker(model) if model is not None else None

    def resolve_account(self, who: str) -> str:
        """The user of PLATFORM:ID, which must have been seen (or added by `users role`)."""
        known_platform(who)
        db = self.open_db()
        try:
            user_id = db.people.resolve(who)
        finally:
            db.close()
        if user_id is None:
            fail(f"no user {who!r} in {self.home} (see hermes users list)", EXIT_REFUSED)
        return user_id

    def user_id(self, requested: str | None) -> str:
        """Our user id for `--user`: a user id (u_…), PLATFORM:ID of a known account, or
        (none given) the owner."""
        from hermes.identity import InvalidUserIdError, owner_user_id, validate_user_id

        if requested and ":" in requested and not requested.startswith("u_"):
            return self.resolve_account(requested)
        try:
            return validate_user_id(requested) if requested else owner_user_id(self.home)
        except InvalidUserIdError as exc:
            fail(str(exc), EXIT_USAGE)


_ALLOWED: set[str] = set()  # what the command line allowed, for this process only


def allow_foreign_home() -> None:
    """`hermes --as-owner-of-home ...`."""
    _ALLOWED.add("foreign home")


def check_owner(home: Path) -> None:
    """Refuse to work on a home that belongs to another user (root running an admin
    command on the service's home would leave files the service cannot write), unless
    `--as-owner-of-home` says so."""
    import os

    try:
        owner = home.stat().st_uid
    except OSError:
        return  # not there yet: whoever makes it owns it
    if owner == os.geteuid() or "foreign home" in _ALLOWED:
        return
    name = _user_name(owner)
    fail(
        f"{home} belongs to {name} (uid {owner}), and this command runs as "
        f"{_user_name(os.geteuid())}: files it writes there would not be writable by the "
        f"service. Run it as that user (sudo -u {name} hermes ...), or add "
        "--as-owner-of-home (before the command) to go on anyway.",
        EXIT_REFUSED,
    )


def _user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _check_damage(db: SessionDB) -> None:
    from hermes.state.engine import StateDBError, explain

    if db.backend == "sqlite" and db.path.stat().st_size > QUICK_CHECK_MAX_BYTES:
        return
    found = db.upkeep.quick_check()
    if found != "ok":
        db.close()
        raise StateDBError(explain(db.path, Exception(found)))


def _waiting(open_: Callable[[], SessionDB], patience: float) -> SessionDB:
    """`open_()`, tried again with the backoff while the database server is not there
    yet, for up to `patience` seconds (each wait logged)."""
    import logging
    import time

    from hermes.backoff import Backoff
    from hermes.state.retry import DatabaseUnavailableError

    backoff = Backoff(first=0.5, cap=10.0)
    deadline = time.monotonic() + patience
    while True:
        try:
            return open_()
        except DatabaseUnavailableError as exc:
            wait = backoff.next()
            if time.monotonic() + wait > deadline:
                raise
            logging.getLogger("gateway").warning(
                "the database is not there yet (%s); trying again in %.1f s", exc, wait
            )
            time.sleep(wait)


def fail(message: str, code: int) -> NoReturn:
    """`message` is plain text: a path, an extra's `[name]` or a person's words in it
    are shown as they are, never read as markup."""
    from rich.markup import escape

    err_console.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    raise typer.Exit(code)


def known_platform(who: str) -> None:
    """Fail clearly on PLATFORM:ID with a platform that does not exist."""
    from gateway.edge.platforms import PACKAGES

    platform = who.partition(":")[0].strip().lower()
    if platform not in PACKAGES:
        fail(f"unknown platform {platform!r} in {who!r}: one of {', '.join(PACKAGES)}", EXIT_USAGE)
