"""The gateways of a home, as `hermes gateway status` and the dashboard's Gateways page
show them: on SQLite the home's one gateway, from its status file (gateway.json); on
PostgreSQL every instance on the database that ran lately, from its heartbeat row, with
the leases it holds (sessions being worked, the maintenance leader, a platform's one
connection) and the events waiting in the shared queue."""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.status_file import GatewayStatus, read_status_file

if TYPE_CHECKING:  # (`hermes gateway --help` loads this module, not the database's)
    from gateway.config import HermesConfig
    from hermes.state.cluster import Instance
    from hermes.state.db import SessionDB


@dataclass(frozen=True, slots=True)
class GatewayInstance:
    id: str
    host: str
    pid: int
    alive: bool
    started_at: datetime
    heartbeat_at: datetime | None  # None: one gateway on SQLite (no heartbeat)
    stopped_at: datetime | None
    http: str | None
    platforms: dict[str, str]  # its platforms now ({} when it is not alive)
    last_platforms: dict[str, str]  # what it said last, alive or not
    leases: list[str]

    @property
    def sessions_leased(self) -> int:
        return sum(1 for name in self.leases if name.startswith("session:"))

    @property
    def holds(self) -> list[str]:
        """The leases it holds beside sessions ("leader", "platform:discord")."""
        return [name for name in self.leases if not name.startswith("session:")]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Gateways:
    backend: str  # "sqlite" or "postgresql"
    instances: list[GatewayInstance]  # the oldest first
    inbox: int | None  # events waiting in the shared queue (None on SQLite: it has none)
    # on SQLite: the status file of a gateway that did not stop cleanly (its pid gone)
    stale: GatewayStatus | None = None

    @property
    def alive(self) -> list[GatewayInstance]:
        return [i for i in self.instances if i.alive]


def gateways(home: Path, config: HermesConfig, db: SessionDB | None) -> Gateways:
    """What runs for `home`; `db` is read only on PostgreSQL (None: not opened, so not
    PostgreSQL)."""
    if db is not None and db.backend == "postgresql":
        found = db.cluster.instances(config.gateway.cluster.lease_seconds)
        return Gateways("postgresql", [_of_row(i) for i in found], db.cluster.waiting())
    status = read_status_file(home)
    if status is None:
        return Gateways("sqlite", [], None)
    return Gateways("sqlite", [_of_file(status)], None, None if status.running else status)


def _of_file(found: GatewayStatus) -> GatewayInstance:
    host = socket.gethostname()
    return GatewayInstance(
        f"{host}:{found.pid}", host, found.pid, found.running, found.started_at,
        heartbeat_at=None, stopped_at=None, http=found.http,
        platforms=found.platforms if found.running else {}, last_platforms=found.platforms,
        leases=[],
    )  # fmt: skip


def _of_row(found: Instance) -> GatewayInstance:
    platforms = {str(k): str(v) for k, v in dict(found.info.get("platforms") or {}).items()}
    http = found.info.get("http")
    return GatewayInstance(
        found.id, found.host, found.pid, found.alive, found.started_at,
        heartbeat_at=found.heartbeat_at, stopped_at=found.stopped_at,
        http=str(http) if http is not None else None,
        platforms=platforms if found.alive else {}, last_platforms=platforms,
        leases=list(found.leases),
    )  # fmt: skip
