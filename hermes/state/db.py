"""state.db: one engine, one repository per aggregate.

- `conversations` (ConversationDB): sessions, messages, search, deliveries;
- `vectors` (VectorDB): message vectors and the embedding queue (hybrid search);
- `people` (PeopleDB): users, identities, roles, blocks, links (merges);
- `access` (AccessDB): link codes, pairing requests, allow/block rules;
- `memory_log` (MemoryLogDB): memory events and versions, consolidation bookkeeping;
- `memory_stores` (MemoryStoresDB): the stores themselves, with memory.backend: database;
- `upkeep` (UpkeepDB): pruning, maintenance, integrity, bulk imports;
- `reminders` (RemindersDB): reminders, their runs (the claim), each person's time zone;
- `cluster` (ClusterDB): several gateways on PostgreSQL: instances, leases, the inbox;
- `dashboard` (DashboardDB): the web dashboard's logins, one-time links, audit log;
- `outbox` (OutboxDB): external memory providers' writes, kept until delivered;
- `logs` (LogsDB): the gateways' warnings and errors, kept for the dashboard;
- `jobs` (JobsDB): the scheduler's runs, their history, an operator's pause and run-now;
- `usage` (UsageDB): tokens used per person, day and model.

All SQL lives in these modules; everything else calls their methods. A second backend
(PostgreSQL) implements the same repositories over its own engine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from hermes import metrics
from hermes.state import engine as eng
from hermes.state import sidecar
from hermes.state.access import AccessDB
from hermes.state.cluster import ClusterDB
from hermes.state.confirmations import ConfirmationsDB
from hermes.state.conversations import ConversationDB
from hermes.state.dashboard import DashboardDB
from hermes.state.jobs import JobsDB
from hermes.state.logs import LogsDB
from hermes.state.loopguard import guard
from hermes.state.marks import MarksDB
from hermes.state.memory_log import MemoryLogDB
from hermes.state.memory_stores import MemoryStoresDB
from hermes.state.outbox import OutboxDB
from hermes.state.people import PeopleDB
from hermes.state.platform_health import PlatformHealthDB
from hermes.state.reminders import RemindersDB
from hermes.state.upkeep import UpkeepDB
from hermes.state.usage import UsageDB
from hermes.state.vectors import VectorDB

STATE_DB_FILENAME = "state.db"
SQLITE_THREADS = 4  # the database executor's threads on SQLite (one writer at a time)
P = ParamSpec("P")
T = TypeVar("T")


class SessionDB:
    def __init__(
        self,
        path: Path,
        patience: float = eng.DEFAULT_PATIENCE_S,
        *,
        url: str | None = None,
        pool_size: int = 5,
    ) -> None:
        """state.db at `path`; with a PostgreSQL `url`, that database instead (`path`
        then only names the home's place for what stays on local disk)."""
        self.path = path
        self.patience = patience
        self.url = url
        if url is None:
            self.engine, self.upgraded_from = eng.open_database(path, patience)
        else:
            self.engine, self.upgraded_from = eng.open_server(url, patience, pool_size)
            sidecar.serve_from(path.parent, self.engine)  # the providers' stores too
        self.backend = self.engine.dialect.name  # "sqlite" | "postgresql"
        guard(self.engine)  # connections taken on a watched event loop are reported
        threads = SQLITE_THREADS if url is None else max(2, pool_size)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="hermes-db"
        )
        self.vectors = VectorDB(self)
        self.conversations = ConversationDB(self, self.vectors)
        self.people = PeopleDB(self)
        self.access = AccessDB(self)
        self.memory_log = MemoryLogDB(self)
        self.memory_stores = MemoryStoresDB(self)
        self.upkeep = UpkeepDB(self)
        self.jobs = JobsDB(self)
        self.usage = UsageDB(self)
        self.platform_health = PlatformHealthDB(self)
        self.reminders = RemindersDB(self)
        self.cluster = ClusterDB(self, threads + 1)  # (and the heartbeat's thread)
        self.dashboard = DashboardDB(self)
        self.outbox = OutboxDB(self)
        self.marks = MarksDB(self)
        self.confirmations = ConfirmationsDB(self)
        self.logs = LogsDB(self)

    @classmethod
    def open(cls, home: Path, url: str | None = None, pool_size: int = 5) -> SessionDB:
        return cls(home / STATE_DB_FILENAME, url=url, pool_size=pool_size)

    async def run(self, call: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`call(*args, **kwargs)` (a repository method, or work made only of them) in
        the database executor, awaited: its lock waits and retries happen on one of the
        executor's threads, never on the event loop. Timed by its name
        (`hermes_db_call_seconds{call}`). Async code uses this; the CLI calls the
        repositories directly."""
        name = getattr(call, "__qualname__", type(call).__name__)
        started = time.perf_counter()
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._executor, functools.partial(call, *args, **kwargs)
            )
        finally:
            metrics.DB_CALL_SECONDS.labels(name).observe(time.perf_counter() - started)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.cluster.close()
        self.engine.dispose()


__all__ = ["STATE_DB_FILENAME", "SessionDB"]
