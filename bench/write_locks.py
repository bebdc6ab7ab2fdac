"""PostgreSQL writes under one database-wide lock, and under locks by key.

    .venv/bin/python bench/write_locks.py [--writers 1,4,8] [--hold-ms 20] [--seconds 5]
        [--admin-url URL]

Each writer is a thread of its own (as the database executor's threads, or gateways on
other machines, are) writing for a person of its own: a write transaction that reads
the person's row and holds its lock `--hold-ms` (a memory write held the old lock a
median 24 ms). Once with one key every write takes (as the database-wide lock every
write took before locks by key did), once with the person's key
(`keys=["person:<id>"]`), on a
database made for the run and dropped after. Prints writes/s and the p50/p99 time a
write waited for its lock, per number of writers.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from hermes.identity import new_user_id
from hermes.state import engine as eng
from hermes.state.db import SessionDB
from hermes.state.models import User

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def run(
    db: SessionDB, people: list[str], keyed: bool, hold: float, seconds: float
) -> dict[str, Any]:
    waits: list[float] = []
    done = 0
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def writer(user_id: str) -> None:
        nonlocal done
        keys = [f"person:{user_id}"] if keyed else ["the-whole-database"]
        held: list[float] = []

        def work(session: Any) -> None:
            held.append(time.perf_counter())  # the locks are held from here
            session.get(User, user_id)
            time.sleep(hold)

        while time.monotonic() < stop:
            asked = time.perf_counter()
            eng.with_retry(db.engine, work, db.patience, keys=keys)
            with lock:
                waits.append(held[-1] - asked)
                done += 1

    threads = [threading.Thread(target=writer, args=(p,)) for p in people]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    waits.sort()
    return {
        "writes_per_s": round(done / wall, 1),
        "wait_p50_ms": round(statistics.median(waits) * 1000, 1),
        "wait_p99_ms": round(waits[max(0, int(len(waits) * 0.99) - 1)] * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", default="1,4,8")
    parser.add_argument("--hold-ms", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--admin-url", default=ADMIN_URL)
    args = parser.parse_args()
    name = f"hermes_bench_locks_{secrets.token_hex(3)}"
    with psycopg.connect(args.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = f"{args.admin_url.rpartition('/')[0]}/{name}"
        home = Path(f"/tmp/{name}")
        home.mkdir()
        db = SessionDB.open(home, url)
        counts = [int(n) for n in args.writers.split(",") if n]
        people = [db.people.ensure_user(new_user_id()).id for _ in range(max(counts))]
        print(f"each write holds its lock {args.hold_ms:g} ms; {args.seconds:g} s per run")
        print("| writers | lock | writes/s | wait p50 ms | wait p99 ms |")
        print("|---|---|---|---|---|")
        for writers in counts:
            for keyed in (False, True):
                found = run(db, people[:writers], keyed, args.hold_ms / 1000, args.seconds)
                what = "the person's key" if keyed else "the whole database"
                print(
                    f"| {writers} | {what} | {found['writes_per_s']} | "
                    f"{found['wait_p50_ms']} | {found['wait_p99_ms']} |"
                )
        db.close()
    finally:
        with psycopg.connect(args.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
