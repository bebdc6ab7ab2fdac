"""Scheduler jobs: module-level functions with explicit, persistable arguments.

Each run opens what it needs from the home folder (config, state.db, the auxiliary
model), does its work and closes it again, so a job stored in state.db can run after a
restart, and returns a one-line summary that `hermes scheduler status` shows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

from gateway.app import App, build_app, build_memory, side_model
from gateway.config import HermesConfig, SideTask, load_config, main_endpoint, open_state
from gateway.pipeline.media import collect_garbage
from hermes.agent.conversation import Conversation
from hermes.llm.client import LLMClient
from hermes.state.db import SessionDB
from hermes.state.platform_health import KEPT_DAYS as SPANS_KEPT_DAYS

logger = logging.getLogger(__name__)


def _opened(home: Path) -> tuple[HermesConfig, SessionDB]:
    config = load_config(home)
    return config, open_state(home, config)


@asynccontextmanager
async def _resources(home: Path) -> AsyncIterator[tuple[HermesConfig, SessionDB, LLMClient | None]]:
    """The home's config, state.db and memory model, opened and closed off the loop."""
    config, db = await asyncio.to_thread(_opened, home)
    model = side_model(config, SideTask.MEMORY, db=db)
    try:
        yield config, db, model
    finally:
        if model is not None:
            await model.close()
        await asyncio.to_thread(db.close)


async def consolidation_check(home: str) -> str:
    """Consolidate every store over the threshold (stores in backoff wait)."""
    async with _resources(Path(home)) as (config, db, model):
        service = build_memory(Path(home), config, db, model)
        try:
            runs = await service.check()
            ran = {(run.user_id, run.target) for run in runs}
            over = await db.run(service.over_threshold)
            waiting = [store for user, store in over if (user, store.target) not in ran]
        finally:
            await service.close()
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.outcome.status] = counts.get(run.outcome.status, 0) + 1
    said = [f"{status}: {n}" for status, n in sorted(counts.items())]
    if waiting:  # over the threshold, waiting out the pause after a failed attempt
        more = f" and {len(waiting) - 1} more" if len(waiting) > 1 else ""
        remark = waiting[0].remark()
        said.append(f"{len(waiting)} over the threshold waiting to retry ({remark}{more})")
    return ", ".join(said) or "all stores under the threshold"


async def memory_pending(home: str) -> str:
    """Judge again the memory writes held while the guard's model could not answer."""
    async with _resources(Path(home)) as (config, db, model):
        service = build_memory(Path(home), config, db, model)
        try:
            if not await db.run(service.held_writes):
                return "no held writes"
            report = await service.settle_pending()
        finally:
            await service.close()
    return report.describe()


async def idle_sessions(home: str) -> str:
    """Finalize sessions idle past `sessions.idle_minutes`, with a memory-review pass by
    the same agent the gateway runs (so privacy settings hold here too)."""
    path = Path(home)
    config, db = await asyncio.to_thread(_opened, path)
    app = build_app(path, config, db) if main_endpoint(config) is not None else None
    try:
        idle = await db.run(
            db.conversations.idle_sessions, timedelta(minutes=config.sessions.idle_minutes)
        )
        for chat in idle:
            conv = await db.run(_ended, app, db, chat.user_id, chat.id)
            if app is not None and conv is not None and conv.history:
                await app.agent.review(conv)
        return f"finalized {len(idle)} idle session(s)"
    finally:
        if app is not None:
            await app.close()
        await asyncio.to_thread(db.close)


def _ended(app: App | None, db: SessionDB, user_id: str, session_id: str) -> Conversation | None:
    """An idle session ended; its conversation when its memory review is to follow."""
    conv = app.agent.sessions.resume(user_id, session_id) if app else None
    if app is None or conv is None:
        db.conversations.end_session(session_id, "idle")
        return None
    app.agent.sessions.end(conv, "idle")
    return conv


async def maintenance(home: str) -> str:
    """Daily: WAL checkpoint, FTS optimize, and retention pruning when configured; all of
    it (SQL under the write lock, the media folder's walk) on a thread of its own."""
    return await asyncio.to_thread(_maintain, Path(home))


def _maintain(home: Path) -> str:
    config, db = _opened(home)
    try:
        summary = db.upkeep.maintenance()
        days = config.sessions.retention_days
        if days:
            summary += (
                f"; pruned {db.upkeep.prune(days, dry_run=False)} session(s) older than {days} days"
            )
        removed = collect_garbage(home, db)  # photos etc. of sessions that are gone
        if removed:
            summary += f"; removed {removed} media file(s) no session refers to"
        if db.backend == "postgresql":  # several gateways: ids seen, released leases
            summary += f"; forgot {db.cluster.prune()} old coordination row(s)"
        if ended := db.dashboard.prune():  # dashboard logins and links, a week after expiry
            summary += f"; forgot {ended} ended dashboard login(s) and link(s)"
        if forgotten := db.logs.prune(config.logging.stored_levels()):
            summary += f"; forgot {forgotten} log line(s) past their level's keep_days"
        if spans := db.platform_health.prune():
            summary += f"; forgot {spans} platform state span(s) older than {SPANS_KEPT_DAYS} days"
        if stale := db.outbox.prune():  # provider writes a service never took in 14 days
            summary += f"; gave up on {stale} memory provider write(s) older than 14 days"
        return summary
    finally:
        db.close()
