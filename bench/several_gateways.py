"""Several gateway processes on one PostgreSQL database: throughput, cost, failover.

    .venv/bin/python bench/several_gateways.py [--instances 1,2,3] [--chats 40]
        [--messages 10] [--failover-leases 5,10] [--json] [--admin-url URL]
    .venv/bin/python bench/several_gateways.py --rolling-restart [--chats 30]
    .venv/bin/python bench/several_gateways.py --contention [--instances 0,1,2,3]
        [--people 50,500] [--total 1000]

Real `hermes gateway run` processes (each a home of its own, one database made for the
run on the server `--admin-url` names and dropped after), Telegram in webhook mode
through a round-robin balancer (tests/fakes/balancer.py), the fake OpenAI-compatible
model answering at once. Each of `--chats` people sends `--messages` messages, the next
one when the previous reply arrived, all at once.

Throughput: messages/s and reply latency (push to the Bot API fake until the reply
reaches it) for 1, 2 and 3 instances. On a 2-core machine the CPU is the limit, so what
matters is the cost: CPU seconds of all gateway processes per message, and the
coordination statements per message (`hermes_cluster_statements` over every instance's
/metrics; each statement is one round trip: the event's ids recorded, queued with the
session's lease taken, the rows finished; plus what wake-ups and hand-overs add).

Rolling restart (`--rolling-restart`): three instances, each stopped with SIGTERM and
started again in turn under traffic (see `rolling_restart`); aim: 0 lost, 0 duplicated,
0 out of order.

Contention (`--contention`): instances x people x a model answering at once and one
answering in 1 s, about `--total` messages a run, each person sending the next when the
last was answered: turns/s, the server's write transactions (its transaction-id counter:
one per transaction that wrote), the p99 of how long a write waited for its locks
(`hermes_db_lock_wait_seconds` over every instance's /metrics), how many of those were
a whole-database lock (SQLite's writer; on PostgreSQL none is), and CPU per message of
each gateway and of PostgreSQL (the server's processes, from /proc).

Failover: two instances, lease L; a person's message is mid-turn (the model takes 3 s)
on one instance with another message queued behind it; that instance is SIGKILLed; the
time from the kill to the first reply by the other instance in that chat (the
interrupted message's "send it again", then the queued one's answer). Aim: <= L + 2 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import secrets
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

from tests.fakes.balancer import Balancer
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.fleet import Fleet, Platforms, fleet_config, start_fleet

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
MARK = re.compile(r"\bc(\d+)m(\d+)\b")
STATEMENTS = re.compile(r"^hermes_cluster_statements_total ([0-9.e+]+)$", re.M)
LOCK_BUCKET = re.compile(r"^hermes_db_lock_wait_seconds_bucket\{([^}]*)\} ([0-9.e+]+)$", re.M)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def echo(delay_for: set[str], every: float = 0.0) -> Any:
    """The model: "re <mark>", in 3 s for the marks in `delay_for`, else in `every` s."""

    def respond(body: dict[str, Any]) -> Reply:
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        found = MARK.search(str(users[-1].get("content", ""))) if users else None
        mark = found.group(0) if found else ""
        return Reply(text=f"re {mark}", delay=3.0 if mark in delay_for else every)

    return respond


class Database:
    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.name = f"hermes_bench_gw_{secrets.token_hex(3)}"
        self.url = f"{admin_url.rpartition('/')[0]}/{self.name}"

    def __enter__(self) -> Database:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        return self

    def __exit__(self, *_exc: object) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks


def statements(text: str) -> float:
    found = STATEMENTS.search(text)
    return float(found.group(1)) if found else 0.0


def replies_to(tg: FakeTelegram, chat: int) -> list[str]:
    return [str(p.get("text", "")) for c, _, p in list(tg.posts) if c == chat]


@contextlib.contextmanager
def running(
    admin_url: str, instances: int, lease_s: float, slow: set[str], every: float = 0.0
) -> Iterator[tuple[Fleet, FakeTelegram, list[str], Balancer]]:
    """`instances` gateways on a database of their own behind the balancer, Telegram
    pushing webhooks, the model answering at once (in 3 s for the marks in `slow`);
    0: one gateway on SQLite (state.db in its home, no coordination), the baseline."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        url = "" if instances == 0 else stack.enter_context(Database(admin_url)).url
        llm, tg = FakeOpenAI().start(), FakeTelegram().start()
        slack, discord = FakeSlack().start(), FakeDiscord().start()
        lb = Balancer().start()
        fleet = Fleet(Path(tmp), url, lease_s)
        try:
            llm.responder = echo(slow, every)
            names = [f"gw{i + 1}" for i in range(max(instances, 1))]
            for name in names:
                fleet_config(
                    fleet.home(name),
                    llm,
                    Platforms(tg, slack, discord),
                    lb.url,
                    url,
                    lease_s=lease_s,
                    only_telegram=True,
                )
            yield fleet, tg, start_fleet(fleet, names, lb), lb
        finally:
            fleet.stop_all()
            for fake in (lb, tg, slack, discord, llm):
                fake.stop()


class Replies:
    """One thread reads the Bot API fake's new posts and counts them per chat; people
    wait on a condition for theirs (many threads each copying every post apart would
    starve the fakes, which share this process)."""

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg, self.counts, self.seen = tg, dict[int, int](), 0
        self.cond = threading.Condition()
        self.done = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self.done.wait(0.002):
            posts = self.tg.posts
            if len(posts) == self.seen:
                continue
            fresh = posts[self.seen : len(posts)]
            self.seen += len(fresh)
            with self.cond:
                for chat, _, _ in fresh:
                    self.counts[chat] = self.counts.get(chat, 0) + 1
                self.cond.notify_all()

    def count(self, chat: int) -> int:
        with self.cond:
            return self.counts.get(chat, 0)

    def wait(self, chat: int, more_than: int) -> None:
        with self.cond:
            while self.counts.get(chat, 0) <= more_than:
                self.cond.wait(1.0)


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        return str(response.read().decode())


def lock_waits(text: str) -> dict[str, dict[float, float]]:
    """`hermes_db_lock_wait_seconds`'s cumulative buckets, by lock ("write", "keys")."""
    found: dict[str, dict[float, float]] = {}
    for labels, value in LOCK_BUCKET.findall(text):
        parts = dict(LABEL.findall(labels))
        bucket = found.setdefault(parts["lock"], {})
        bucket[float(parts["le"])] = bucket.get(float(parts["le"]), 0.0) + float(value)
    return found


def added(*counts: dict[str, dict[float, float]]) -> dict[str, dict[float, float]]:
    total: dict[str, dict[float, float]] = {}
    for each in counts:
        for lock, buckets in each.items():
            into = total.setdefault(lock, {})
            for le, value in buckets.items():
                into[le] = into.get(le, 0.0) + value
    return total


def since(after: dict[str, dict[float, float]], before: dict[str, dict[float, float]]) -> Any:
    return {
        lock: {le: v - before.get(lock, {}).get(le, 0.0) for le, v in buckets.items()}
        for lock, buckets in after.items()
    }


def quantile(buckets: dict[float, float], q: float) -> float:
    """The bucket bound under which `q` of the observations fall (an upper bound)."""
    ordered = sorted(buckets.items())
    total = ordered[-1][1] if ordered else 0.0
    if not total:
        return 0.0
    return next(le for le, count in ordered if count >= q * total)


def postgres_cpu_seconds() -> float:
    """CPU of the whole PostgreSQL server: the postmaster, the children it reaped, and
    the ones alive (connections, the writer, the WAL writer...)."""
    procs = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            head, rest = stat.read_text().rsplit(")", 1)
            if head.split("(", 1)[1] == "postgres":
                procs[int(stat.parent.name)] = rest.split()
    total = 0
    for fields in procs.values():
        total += int(fields[11]) + int(fields[12])  # utime + stime
        if int(fields[1]) not in procs:  # the postmaster: its reaped children too
            total += int(fields[13]) + int(fields[14])
    return total / 100.0


def written_transactions(admin_url: str) -> int:
    """The server's transaction id counter: one per transaction that wrote anything."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    return int(row[0]) if row else 0


def throughput(
    admin_url: str, instances: int, chats: int, messages: int, every: float = 0.0
) -> dict[str, Any]:
    """`chats` people each sending `messages` messages, the next when the last was
    answered, to a model answering in `every` s; 0 instances: one gateway on SQLite."""
    with running(admin_url, instances, 30.0, set(), every) as (fleet, tg, urls, _lb):
        watch = Replies(tg)
        for chat in range(chats):  # each person known before the clock starts
            tg.user_message(f"hello c{chat}m999", user_id=5000 + chat)
        for chat in range(chats):
            watch.wait(5000 + chat, 0)
        latencies: list[float] = []
        lock = threading.Lock()

        def person(chat: int) -> None:
            user = 5000 + chat
            for n in range(messages):
                seen = watch.count(user)
                start = time.perf_counter()
                tg.user_message(f"message c{chat}m{n}", user_id=user)
                watch.wait(user, seen)
                with lock:
                    latencies.append(time.perf_counter() - start)

        pids = [proc.pid for proc in fleet.procs.values()]
        cpu0 = [cpu_seconds(pid) for pid in pids]
        texts0 = [metrics_text(url) for url in urls]
        pg0, tx0 = postgres_cpu_seconds(), written_transactions(admin_url)
        began = time.perf_counter()
        people = [threading.Thread(target=person, args=(c,)) for c in range(chats)]
        for thread in people:
            thread.start()
        for thread in people:
            thread.join()
        wall = time.perf_counter() - began
        cpu = [cpu_seconds(pid) - before for pid, before in zip(pids, cpu0, strict=True)]
        pg, tx = postgres_cpu_seconds() - pg0, written_transactions(admin_url) - tx0
        texts = [metrics_text(url) for url in urls]
        sent = sum(statements(t) for t in texts) - sum(statements(t) for t in texts0)
        waits = since(added(*map(lock_waits, texts)), added(*map(lock_waits, texts0)))
        every_lock = added(*({"all": b} for b in waits.values()))["all"] if waits else {}
        total = chats * messages
        latencies.sort()
        watch.done.set()
        return {
            "instances": instances or "1, SQLite",
            "people": chats,
            "model_s": every,
            "messages": total,
            "messages_per_s": round(total / wall, 1),
            "p50_ms": round(statistics.median(latencies) * 1000, 1),
            "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 1),
            "gateway_cpu_ms_per_message": round(sum(cpu) / total * 1000, 2),
            "cpu_ms_per_message_by_instance": [round(c / total * 1000, 2) for c in cpu],
            "postgres_cpu_ms_per_message": round(pg / total * 1000, 2) if instances else 0,
            "write_transactions_per_s": round(tx / wall, 1) if instances else 0,
            "write_transactions_per_message": round(tx / total, 2) if instances else 0,
            "p99_lock_wait_ms": round(quantile(every_lock, 0.99) * 1000, 2) if every_lock else None,
            "locked_writes_per_message": round(max(every_lock.values(), default=0.0) / total, 2),
            "whole_database_locks_per_message": round(
                max(waits.get("write", {}).values(), default=0.0) / total, 2
            ),
            "coordination_statements_per_message": round(sent / total, 2),
        }


def contention(admin_url: str, instances: list[int], people: list[int], total: int) -> Any:
    """Every (instances, people, model delay) once: about `total` messages a run (each
    person sends total / people of them), a model answering at once and one in 1 s;
    instances 0: one gateway on SQLite, the baseline."""
    return [
        throughput(admin_url, n, chats, max(1, total // chats), every)
        for every in (0.0, 1.0)
        for chats in people
        for n in instances
    ]


def failover(admin_url: str, lease_s: float) -> dict[str, Any]:
    with running(admin_url, 2, lease_s, {"c1m0"}) as (fleet, tg, _urls, _lb):
        tg.user_message("slow one c1m0", user_id=6001)
        holder = None
        while holder is None:
            holder = next(
                (i for i in fleet.instances() if any("6001" in n for n in i.leases)), None
            )
            time.sleep(0.02)
        tg.user_message("queued behind it c1m1", user_id=6001)
        time.sleep(0.3)
        victim = next(n for n, proc in fleet.procs.items() if proc.pid == holder.pid)
        killed = time.perf_counter()
        fleet.kill(victim)
        while not replies_to(tg, 6001):
            time.sleep(0.01)
        first = time.perf_counter() - killed
        while len(replies_to(tg, 6001)) < 2:
            time.sleep(0.01)
        both = time.perf_counter() - killed
        return {
            "lease_s": lease_s,
            "first_reply_s": round(first, 2),
            "queued_answered_s": round(both, 2),
            "replies": replies_to(tg, 6001),
        }


def rolling_restart(admin_url: str, chats: int, messages: int) -> dict[str, Any]:
    """Three instances, `chats` people each sending `messages` messages 0.5 s apart
    (the model answers in 1 s: turns run and wait at every stop) while each instance in
    turn gets SIGTERM and is started again once it has exited: messages never answered,
    answered twice, answered out of order, asked to be sent again; how long each stop
    took (the hand-over: the running turns end, what waits goes on elsewhere)."""
    with running(admin_url, 3, 30.0, set(), every=1.0) as (fleet, tg, urls, lb):
        by_name = dict(zip(fleet.procs, urls, strict=True))

        def person(chat: int) -> None:
            for n in range(messages):
                tg.user_message(f"message c{chat}m{n}", user_id=7000 + chat)
                time.sleep(0.5)

        people = [threading.Thread(target=person, args=(c,)) for c in range(chats)]
        for thread in people:
            thread.start()
        stops = []
        for name in list(fleet.procs):
            time.sleep(1.0)
            proc = fleet.procs[name]
            began = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
            stops.append(time.perf_counter() - began)
            lb.backends.remove(by_name[name])
            fleet.start(name)
            by_name[name] = fleet.http(name)
            lb.backends.append(by_name[name])
        for thread in people:
            thread.join()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not fleet.settled():
            time.sleep(0.2)
        time.sleep(1.0)
        lost = duplicated = out_of_order = asked = 0
        for chat in range(chats):
            got = replies_to(tg, 7000 + chat)
            asked += sum("send it again" in r for r in got)
            marks = [int(m.group(2)) for r in got if (m := MARK.search(r))]
            lost += len(set(range(messages)) - set(marks))
            duplicated += len(marks) - len(set(marks))
            out_of_order += marks != sorted(marks)
        return {
            "messages": chats * messages,
            "lost": lost,
            "duplicated": duplicated,
            "chats_out_of_order": out_of_order,
            "asked_again": asked,
            "stop_s": [round(s, 2) for s in stops],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", default="0,1,2,3", help="0: one gateway on SQLite")
    parser.add_argument("--chats", type=int, default=40)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--failover-leases", default="5,10")
    parser.add_argument("--admin-url", default=ADMIN_URL)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--rolling-restart",
        action="store_true",
        help="only the rolling restart: 3 instances stopped and started in turn",
    )
    parser.add_argument(
        "--contention",
        action="store_true",
        help="only the contention runs: --instances x --people x a model in 0 s and 1 s",
    )
    parser.add_argument("--people", default="50,500", help="with --contention")
    parser.add_argument(
        "--total", type=int, default=1000, help="with --contention: messages in each run"
    )
    args = parser.parse_args()
    if args.contention:
        found = contention(
            args.admin_url,
            [int(n) for n in args.instances.split(",") if n],
            [int(n) for n in args.people.split(",") if n],
            args.total,
        )
        if args.json:
            print(json.dumps(found, indent=2))
            return
        print(
            "| model | people | instances | turns/s | p50 / p99 reply ms | write tx/s (per msg)"
            " | writes taking locks /msg (whole-db) | p99 lock wait ms"
            " | gateway CPU ms/msg (by instance)"
            " | PostgreSQL CPU ms/msg |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for run in found:  # (instances 0: one gateway on SQLite, its write lock)
            by = ", ".join(f"{c:g}" for c in run["cpu_ms_per_message_by_instance"])
            print(
                f"| {run['model_s']:g} s | {run['people']} | {run['instances']} | "
                f"{run['messages_per_s']} | {run['p50_ms']:g} / {run['p99_ms']:g} | "
                f"{run['write_transactions_per_s']} ({run['write_transactions_per_message']}) | "
                f"{run['locked_writes_per_message']} ({run['whole_database_locks_per_message']}) | "
                f"{'-' if run['p99_lock_wait_ms'] is None else run['p99_lock_wait_ms']} | "
                f"{run['gateway_cpu_ms_per_message']} ({by}) | "
                f"{run['postgres_cpu_ms_per_message']} |"
            )
        return
    if args.rolling_restart:
        found = rolling_restart(args.admin_url, min(args.chats, 30), args.messages)
        print(json.dumps(found, indent=2))
        return
    runs = [
        throughput(args.admin_url, int(n), args.chats, args.messages)
        for n in args.instances.split(",")
        if n
    ]
    failovers = [failover(args.admin_url, float(s)) for s in args.failover_leases.split(",") if s]
    if args.json:
        print(json.dumps({"throughput": runs, "failover": failovers}, indent=2))
        return
    print(f"{args.chats} people x {args.messages} messages, each sent when the last was answered")
    print("| instances | msg/s | p50 ms | p99 ms | gateway CPU ms/msg | coordination stmts/msg |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        print(
            f"| {run['instances']} | {run['messages_per_s']} | {run['p50_ms']} | "
            f"{run['p99_ms']} | {run['gateway_cpu_ms_per_message']} | "
            f"{run['coordination_statements_per_message']} |"
        )
    print("| lease s | first reply by the other instance s | queued message answered s |")
    print("|---|---|---|")
    for found in failovers:
        print(f"| {found['lease_s']:g} | {found['first_reply_s']} | {found['queued_answered_s']} |")


if __name__ == "__main__":
    main()
