"""Worker processes for the state.db concurrency and crash tests (run as scripts)."""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path

from hermes.state.conversations import NewMessage
from hermes.state.db import SessionDB
from hermes.state.search import SearchScope


def open_db(where: str) -> SessionDB:
    """state.db at a path, or the PostgreSQL database at a URL."""
    if where.startswith("postgresql"):
        return SessionDB(Path("unused") / "state.db", url=where)
    return SessionDB(Path(where))


def write(path: str, user: str, worker: int, seconds: float) -> None:
    db = open_db(path)
    chat = db.conversations.start_session(user, "cli", f"writer-{worker}")
    deadline = time.monotonic() + seconds
    count = 0
    while time.monotonic() < deadline:
        batch = [
            NewMessage("user", f"writer{worker} message{count + k} about comets") for k in range(3)
        ]
        db.conversations.add_messages(chat.id, batch)
        count += len(batch)
    print(chat.id, count, flush=True)


def search(path: str, user: str, seconds: float) -> None:
    db = open_db(path)
    deadline = time.monotonic() + seconds
    queries = 0
    while time.monotonic() < deadline:
        db.conversations.search(SearchScope(user), "comets writer1")
        db.conversations.list_sessions(user)
        queries += 1
    print(queries, flush=True)


def write_until_killed(path: str, user: str) -> None:
    db = open_db(path)
    chat = db.conversations.start_session(user, "cli", "crash")
    n = 0
    while True:
        ids = db.conversations.add_messages(
            chat.id, [NewMessage("user", f"durable row {n} " + "x" * 500)]
        )
        print(ids[0], flush=True)  # printed only after the commit returned
        n += 1


def deliver(path: str, users: str, deliverer: str, seconds: float) -> None:
    """Deliver provider writes as a gateway would: claim a person's oldest, hold it a
    moment (the provider call), mark it done; print each delivery (id, person, from,
    to) until nothing is left or time is up."""
    db = open_db(path)
    people = users.split(",")
    deadline = time.monotonic() + seconds
    idle = 0
    while time.monotonic() < deadline and idle < 50:
        got = False
        for user in people:
            item = db.outbox.claim("fake", user, deliverer, timedelta(seconds=30))
            if item is None:
                continue
            got = True
            began = time.time()  # the provider call: from the claim to before `done`
            time.sleep(0.005)
            ended = time.time()
            db.outbox.done(item.id)
            print(item.id, user, began, ended, item.payload["n"], flush=True)
        idle = 0 if got else idle + 1
        if not got:
            time.sleep(0.01)


if __name__ == "__main__":
    command, path, user, *rest = sys.argv[1:]
    if command == "write":
        write(path, user, int(rest[0]), float(rest[1]))
    elif command == "search":
        search(path, user, float(rest[0]))
    elif command == "crash":
        write_until_killed(path, user)
    elif command == "deliver":
        deliver(path, user, rest[0], float(rest[1]))
