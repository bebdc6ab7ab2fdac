"""state.db: one engine, one repository per aggregate.

- `conversations` (ConversationDB): sessions, messages, search, deliveries;
- `vectors` (VectorDB): message vectors and the embedding queue (hybrid search);
- `people` (PeopleDB): users, identities, roles, blocks, links (merges);
- `access` (AccessDB): link codes, pairing requests, allow/block rules;
- `memory_log` (MemoryLogDB): memory events and versions, consolidation bookkeeping;
- `memory_stores` (MemoryStoresDB): the stores themselves, with memory.backend: database;
- `upkeep` (UpkeepDB): job results, pruning, maintenance, integrity, bulk imports;
- `reminders` (RemindersDB): reminders, their runs (the claim), each person's time zone;
- `cluster` (ClusterDB): several gateways on PostgreSQL: instances, leases, the inbox;
- `dashboard` (DashboardDB): the web dashboard's logins, one-time links, audit log.
- `outbox` (OutboxDB): external memory providers' writes, kept until delivered.

All SQL lives in these modules; everything else calls their methods. A second backend
(PostgreSQL) implements the same repositories over its own engine.
"""

from __future__ import annotations

from pathlib import Path

from hermes.state import engine as eng
from hermes.state import sidecar
from hermes.state.access import AccessDB
from hermes.state.cluster import ClusterDB
from hermes.state.conversations import ConversationDB
from hermes.state.dashboard import DashboardDB
from hermes.state.memory_log import MemoryLogDB
from hermes.state.memory_stores import MemoryStoresDB
from hermes.state.outbox import OutboxDB
from hermes.state.people import PeopleDB
from hermes.state.reminders import RemindersDB
from hermes.state.upkeep import UpkeepDB
from hermes.state.vectors import VectorDB

STATE_DB_FILENAME = "state.db"


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
        self.vectors = VectorDB(self)
        self.conversations = ConversationDB(self, self.vectors)
        self.people = PeopleDB(self)
        self.access = AccessDB(self)
        self.memory_log = MemoryLogDB(self)
        self.memory_stores = MemoryStoresDB(self)
        self.upkeep = UpkeepDB(self)
        self.reminders = RemindersDB(self)
        self.cluster = ClusterDB(self)
        self.dashboard = DashboardDB(self)
        self.outbox = OutboxDB(self)

    @classmethod
    def open(cls, home: Path, url: str | None = None, pool_size: int = 5) -> SessionDB:
        return cls(home / STATE_DB_FILENAME, url=url, pool_size=pool_size)

    def close(self) -> None:
        self.cluster.close()
        self.engine.dispose()


__all__ = ["STATE_DB_FILENAME", "SessionDB"]
