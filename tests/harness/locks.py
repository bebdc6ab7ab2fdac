"""Another writer holding the lock a turn needs (the loop-stall test and bench)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path


def hold_the_lock(
    path: Path, url: str | None, session_id: str, held: threading.Event, release: threading.Event
) -> None:
    """SQLite's write lock (BEGIN IMMEDIATE on its own connection to `path`); on
    PostgreSQL (`url`), where a message is appended without the writers' lock, the row
    lock of the session it goes to (every stored message updates its session's row).
    `held` is set once it is held; it is let go at `release` (or after 60 s)."""
    if url is None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            held.set()
            release.wait(60)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
        held.set()
        release.wait(60)
