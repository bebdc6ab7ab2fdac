"""Several gateway processes on one PostgreSQL database, behind a load balancer: every
message answered exactly once and in the order sent, any instance may die.

Real processes (`hermes gateway run`), a real PostgreSQL, the platform fakes pushing
webhooks through a small balancer (tests/fakes/balancer.py) that also duplicates some
deliveries to a second instance; nothing is patched."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hermes.memory import entries as fmt
from hermes.memory.consolidation import INSTRUCTIONS
from hermes.state import postgres
from hermes.state.db import SessionDB
from hermes.state.models import utcnow
from tests.fakes.balancer import Balancer
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.matrix_server import BOT as MATRIX_BOT
from tests.fakes.matrix_server import FakeMatrix
from tests.fakes.matrix_server import user as matrix_user
from tests.fakes.mattermost_server import FakeMattermost
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.harness.cli import hermes
from tests.harness.fleet import SLACK_SIGNING, Fleet, Platforms, fleet_config, start_fleet
from tests.harness.reminders import telegram_reminder

pytestmark = [pytest.mark.parametrize("backend", ["postgresql"], indirect=True), pytest.mark.slow]

MARK = re.compile(r"\bc(\d+)m(\d+)\b")
LEASE_S = 3.0


def echo(body: dict[str, Any]) -> Reply:
    """The reply names the message it answers (the last user message's mark)."""
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    found = MARK.search(str(users[-1].get("content", ""))) if users else None
    return Reply(text=f"re {found.group(0)}" if found else "ok")


def marks_asked(llm: FakeOpenAI) -> list[str]:
    """The mark of each model request's last user message (one per turn)."""
    asked = []
    for body in list(llm.requests):
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        found = MARK.search(str(users[-1].get("content", ""))) if users else None
        if found:
            asked.append(found.group(0))
    return asked


@pytest.fixture
def fakes(telegram: FakeTelegram, slack: FakeSlack, discord_fake: FakeDiscord) -> Platforms:
    return Platforms(telegram, slack, discord_fake)


@pytest.fixture
def balancer() -> Iterator[Balancer]:
    lb = Balancer(duplicate_every=7).start()
    yield lb
    lb.stop()


@pytest.fixture
def fleet(home: Path, database_url: str, fakes: Platforms, balancer: Balancer) -> Iterator[Fleet]:
    """(Stopped before the fakes and the balancer it uses.)"""
    found = Fleet(home, database_url, LEASE_S)
    yield found
    found.stop_all()


def configure(
    fleet: Fleet,
    names: list[str],
    llm: FakeOpenAI,
    fakes: Platforms,
    lb: Balancer,
    *,
    lease_s: float = LEASE_S,
    slack_events: bool = True,
    **options: Any,
) -> None:
    """Each of `names` configured for the fleet (`options`: fleet_config's); Slack's
    HTTP events sent through the balancer unless `slack_events` is False."""
    fleet.lease_s = lease_s
    for name in names:
        home = fleet.home(name)
        fleet_config(home, llm, fakes, lb.url, fleet.database_url, lease_s=lease_s, **options)
    if slack_events:
        fakes.slack.events_to(f"{lb.url}/slack/events", SLACK_SIGNING)


# -- who says what ----------------------------------------------------------------------------


def say(fakes: Platforms, chat: int, text: str) -> None:
    """Chat `chat` (0-19 Telegram, 20-39 Slack, 40-49 Discord) sends `text`."""
    if chat < 20:
        fakes.telegram.user_message(text, user_id=1000 + chat)
    elif chat < 40:
        fakes.slack.message(text, user=f"U{1000 + chat}", channel=f"D{1000 + chat}")
    else:
        fakes.discord.message(text, user=discord_user(chat))


def replies(fakes: Platforms, chat: int) -> list[str]:
    """What chat `chat` was sent, in the order it arrived."""
    if chat < 20:
        posts = list(fakes.telegram.posts)
        return [str(p.get("text", "")) for c, _, p in posts if c == 1000 + chat]
    if chat < 40:
        channel = f"D{1000 + chat}"
        return [str(p.get("text", "")) for c, _, p in list(fakes.slack.posts) if c == channel]
    channel = f"6{discord_user(chat)[1:]}"  # the fake's DM channel with that user
    return [
        str(p.get("content", ""))
        for p in list(fakes.discord.posted)
        if p.get("channel_id") == channel
    ]


def discord_user(chat: int) -> str:
    return f"7000000000000{1000 + chat}"


def wait_for(check: Callable[[], bool], what: str | Callable[[], str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.1)


def test_three_instances_answer_every_message_once_and_in_order(
    fleet: Fleet, fake_llm: FakeOpenAI, fakes: Platforms, balancer: Balancer
) -> None:
    """50 chats x 10 messages over Telegram (webhook), Slack (Events API) and Discord
    (one websocket), three instances behind the balancer, some deliveries duplicated to
    two instances: every message answered once, each chat's replies in the order sent,
    no model request made twice for one message; one setWebhook, by the leader."""
    names = ["gw1", "gw2", "gw3"]
    # (a lease long enough that two cores busy with three gateways and the other tests
    # never stall a heartbeat past it: nothing here is about failing over)
    configure(fleet, names, fake_llm, fakes, balancer, lease_s=15.0)
    fake_llm.responder = echo
    start_fleet(fleet, names, balancer)
    fakes.discord.wait_ready()
    chats, per_chat = range(50), 10

    def chat_sends(chat: int) -> None:
        for n in range(per_chat):
            say(fakes, chat, f"message c{chat}m{n} please")
            time.sleep(0.01)

    senders = [threading.Thread(target=chat_sends, args=(c,)) for c in chats]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()

    def done() -> bool:
        return all(len(replies(fakes, c)) >= per_chat for c in chats)

    def missing() -> str:
        short = {c: len(replies(fakes, c)) for c in chats if len(replies(fakes, c)) < per_chat}
        return f"chats still waiting for replies: {short}; logs: {fleet.log('gw1')[-3000:]}"

    wait_for(done, missing, 240)
    wait_for(fleet.settled, lambda: f"turns still running: {fleet.dump()}", 60)
    for chat in chats:
        expected = [f"re c{chat}m{n}" for n in range(per_chat)]
        assert replies(fakes, chat) == expected, chat
    asked = marks_asked(fake_llm)
    assert sorted(asked) == sorted(f"c{c}m{n}" for c in chats for n in range(per_chat))
    assert len(fakes.telegram.sent("setWebhook")) == 1
    assert balancer.duplicated > 0  # some deliveries did reach two instances
    served = balancer.by_backend
    assert len(served) == 3 and min(served.values()) > 0  # every instance took its share
    holders = [i for i in fleet.instances() if "platform:discord" in i.leases]
    assert len(holders) == 1 and len(fakes.discord.identifies) == 1
    holder = f"http://{holders[0].info['http']}"

    def holder_metrics() -> str:
        with urllib.request.urlopen(f"{holder}/metrics", timeout=10) as response:
            return str(response.read().decode())

    wait_for(
        lambda: 'hermes_leases_held{kind="platform"} 1.0' in holder_metrics(),
        "the holder's metrics do not show its platform lease",
        10,
    )
    for url in balancer.backends:
        with urllib.request.urlopen(f"{url}/readyz", timeout=10) as response:
            assert response.status == 200  # standby instances are ready too
    # the operator's view: every instance, from any home or chat
    status = hermes("gateway", "status", "--json", home=fleet.home("gw2"))
    listed = json.loads(status.stdout)
    assert status.returncode == 0 and listed["running"] and listed["inbox"] == 0
    assert sorted(i["pid"] for i in listed["instances"] if i["alive"]) == sorted(
        p.pid for p in fleet.procs.values()
    )
    doctor = hermes("doctor", "--json", home=fleet.home("gw3"))
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert "3 running on the database" in checks["gateways"]["detail"]
    assert checks["gateways: wake-ups"]["status"] == "ok"
    assert "gateways: platforms" not in checks and "gateways: queue" not in checks
    probe = SessionDB.open(fleet.root / "probe", fleet.database_url)
    try:
        admin = probe.people.ensure_user("u_00000000000000f4").id
        probe.people.set_role(admin, "admin")
        probe.people.ensure_identity("telegram", "1099", admin)
    finally:
        probe.close()
    fakes.telegram.user_message("/admin status", user_id=1099)

    def admin_replies() -> list[str]:
        return [str(p.get("text", "")) for c, _, p in list(fakes.telegram.posts) if c == 1099]

    wait_for(lambda: bool(admin_replies()), "no /admin status", 30)
    shown = admin_replies()[0]
    assert "Instances: 3" in shown and "platform:discord;" in shown, shown
    codes = fleet.stop_all()
    assert set(codes.values()) == {0}, {n: fleet.log(n)[-2000:] for n in names}
    for name in names:
        assert "Traceback" not in fleet.log(name), fleet.log(name)


HOLD_S = 15.0  # a lock held by "another writer" is let go once the chats are answered


def test_a_write_lock_held_elsewhere_stalls_no_instance_and_no_other_chat(
    fleet: Fleet, fake_llm: FakeOpenAI, fakes: Platforms, balancer: Balancer, database_url: str
) -> None:
    """Two instances; another connection holds one person's memory lock (what a long
    consolidation or a link takes) and then the row of every known person (what a bulk
    change would): while it holds them everyone is answered, on both instances, and
    each instance's /healthz answers at once (the bench's figure: bench/loop_stall.py)."""
    import psycopg

    names = ["gw1", "gw2"]
    configure(
        fleet, names, fake_llm, fakes, balancer,
        lease_s=15.0, only_telegram=True, slack_events=False,
    )  # fmt: skip
    fake_llm.responder = echo
    urls = start_fleet(fleet, names, balancer)
    chats = range(8)
    for chat in chats:  # each person known (their first message makes them) before
        say(fakes, chat, f"hello c{chat}m0")
    wait_for(lambda: all(replies(fakes, c) for c in chats), "the first replies never came", 60)

    def held(lock: str) -> tuple[bool, float]:
        """`lock` (a statement) held on a connection of its own while each chat sends one more
        message: (whether every reply came while it was held; the slowest /healthz
        then). Held for HOLD_S at most: a stalled gateway shows as replies after it."""
        taken, release = threading.Event(), threading.Event()
        done = threading.Event()

        def hold() -> None:
            with psycopg.connect(database_url) as conn:
                conn.execute(lock)
                taken.set()
                release.wait(HOLD_S)
                done.set()
                conn.rollback()

        holder = threading.Thread(target=hold)
        holder.start()
        assert taken.wait(10)
        began = time.monotonic()
        before = {c: len(replies(fakes, c)) for c in chats}
        for chat in chats:
            say(fakes, chat, f"during the hold c{chat}m{before[chat]}")
        slowest = 0.0
        while not all(len(replies(fakes, c)) > before[c] for c in chats):
            assert time.monotonic() - began < HOLD_S + 30, "the chats were not answered"
            if not done.is_set():
                for url in urls:
                    asked = time.monotonic()
                    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:
                        assert response.status == 200
                    slowest = max(slowest, time.monotonic() - asked)
            time.sleep(0.05)
        while_held = not done.is_set()
        release.set()
        holder.join(10)
        return while_held, slowest

    probe = SessionDB.open(fleet.root / "probe", database_url)
    try:
        first = probe.people.user_for_identity("telegram", "1000")
    finally:
        probe.close()
    key = f"SELECT pg_advisory_xact_lock({postgres.KEY_LOCKS}, hashtext('memory:{first}'))"
    while_held, slowest = held(key)
    assert while_held, f"the chats waited for one person's memory: {fleet.dump()}"
    assert slowest < 1.0, f"/healthz took {slowest:.2f} s during the hold"
    while_held, slowest = held("SELECT id FROM users FOR UPDATE")
    assert while_held and slowest < 1.0, (while_held, slowest)
    served = balancer.by_backend
    assert len(served) == 2 and min(served.values()) > 0  # both instances took part


def test_an_instance_killed_mid_turn_loses_nothing_and_answers_nothing_twice(
    fleet: Fleet, fake_llm: FakeOpenAI, fakes: Platforms, balancer: Balancer, database_url: str
) -> None:
    """SIGKILL of the instance holding busy sessions and Discord's connection, its
    turns mid-way: after its leases expire the others continue; every message is
    answered once or its sender is asked to send it again; nothing twice; a reminder
    due during the kill is delivered once; Discord's connection is taken over, and a
    message sent on Discord while no instance held it is answered once."""
    names = ["gw1", "gw2", "gw3"]
    configure(fleet, names, fake_llm, fakes, balancer)
    slow = threading.Event()

    def respond(body: dict[str, Any]) -> Reply:
        reply = echo(body)
        return Reply(text=reply.text, delay=2.0 if not slow.is_set() else 0.0)

    fake_llm.responder = respond
    start_fleet(fleet, names, balancer)
    fakes.discord.wait_ready()
    [holder] = [i for i in fleet.instances() if "platform:discord" in i.leases]
    victim = next(n for n in names if fleet.procs[n].pid == holder.pid)
    chats = [0, 1, 2, 20, 21, 22, 40, 41, 42]
    for chat in chats:
        say(fakes, chat, f"first c{chat}m0")
        say(fakes, chat, f"second c{chat}m1")

    discord_sessions = {
        f"session:discord:dm:6{discord_user(c)[1:]}:-:{discord_user(c)}" for c in (40, 41, 42)
    }

    def victim_busy() -> bool:  # its Discord turns are running (the model takes 2 s)
        found = fleet.instance_of(victim)
        return found is not None and discord_sessions <= set(found.leases)

    wait_for(victim_busy, lambda: f"{victim} never took its sessions: {fleet.dump()}", 30)
    probe = SessionDB.open(fleet.root / "probe", database_url)
    try:
        channel = f"6{discord_user(40)[1:]}"  # the fake's DM channel with that person
        last_read = int(fakes.discord.history[channel][-1]["id"])

        def read_there() -> bool:  # the victim wrote where it read chat 40 (every second)
            marks = probe.marks.recent("discord", utcnow() - timedelta(hours=1), 50)
            return any(m.chat_id == channel and m.position >= last_read for m in marks)

        wait_for(read_there, "the victim never noted where it read chat 40", 20)
        owner = probe.people.ensure_user("u_00000000000000f1").id
        probe.people.ensure_identity("telegram", "1000", owner)
        reminder = telegram_reminder(
            owner, "1000", "water the plants", due_at=utcnow() + timedelta(seconds=2)
        )
        assert probe.reminders.add(10, reminder) is not None
    finally:
        probe.close()
    fleet.kill(victim)  # mid-turn: the model takes 2 s to answer
    slow.set()
    # sent while no instance holds Discord's connection: Discord replays nothing to the
    # next session; the instance taking the lease over fetches it from the history
    fakes.discord.message("third c40m2", user=discord_user(40), live=False)

    def settled() -> bool:
        return all(len(replies(fakes, c)) >= 2 for c in chats) and any(
            "c40m2" in r for r in replies(fakes, 40)
        )

    wait_for(
        settled,
        lambda: f"replies: { {c: replies(fakes, c) for c in chats} }; {fleet.dump()}",
        60,
    )
    wait_for(lambda: any("water the plants" in r for r in replies(fakes, 0)), "no reminder", 60)
    wait_for(fleet.settled, lambda: f"turns still running: {fleet.dump()}", 60)
    for chat in chats:
        got = replies(fakes, chat)
        answered = [r for r in got if r.startswith("re ")]
        asked_again = [r for r in got if "send it again" in r]
        assert len(answered) == len(set(answered)), (chat, got)  # nothing twice
        for n in (0, 1):  # each message: answered once, or its sender asked to send again
            mark = f"re c{chat}m{n}"
            assert answered.count(mark) == 1 or asked_again, (chat, got)
    assert [r for r in replies(fakes, 40) if "c40m2" in r] == ["re c40m2"]  # once
    assert sum("water the plants" in r for r in replies(fakes, 0)) == 1
    assert len(fakes.discord.identifies) == 2  # the connection was taken over
    alive = [i for i in fleet.instances() if i.alive]
    assert len(alive) == 2 and any("platform:discord" in i.leases for i in alive)


FULL = [f"Note {i}: the staging cluster runs Postgres replica number {i}" for i in range(1, 9)]


def consolidation(body: dict[str, Any]) -> bool:
    return str(body.get("messages", [{}])[0].get("content", "")) == INSTRUCTIONS


def test_a_consolidation_due_while_the_leader_dies_runs_once_later(
    fleet: Fleet, fake_llm: FakeOpenAI, fakes: Platforms, balancer: Balancer, database_url: str
) -> None:
    """Maintenance runs on the leader only; the leader is SIGKILLed; a store goes over
    the threshold meanwhile: the other instance takes the leader lease when it expires
    and consolidates the store once."""
    names = ["gw1", "gw2"]
    memory = "  memory_char_limit: 560\n  consolidation:\n    check_interval_minutes: 0.05\n"
    configure(fleet, names, fake_llm, fakes, balancer, memory=memory)
    numbers = ", ".join(str(i) for i in range(1, 8))
    merged = f"Notes {numbers}: the staging cluster runs Postgres replica number {numbers}"
    proposal = {
        "entries": [
            {"text": merged, "sources": list(range(1, 8))},
            {"text": FULL[7], "sources": [8]},
        ],
        "dropped": [],
    }
    fake_llm.responder = lambda body: Reply(
        text=json.dumps(proposal) if consolidation(body) else "ok"
    )
    start_fleet(fleet, names, balancer)
    [leader] = [i for i in fleet.instances() if "leader" in i.leases]
    dead = next(n for n in names if fleet.procs[n].pid == leader.pid)
    survivor = next(n for n in names if n != dead)
    fleet.kill(dead)
    probe = SessionDB.open(fleet.root / "probe", database_url)
    try:
        user = probe.people.ensure_user("u_00000000000000f2").id
        stored = probe.memory_stores.read(user, "memory")
        assert probe.memory_stores.swap(stored, fmt.serialize(FULL), "")  # 85 % of 560

        def consolidated() -> bool:
            text = probe.memory_stores.read(user, "memory").text
            return len(fmt.parse(text)) == 2

        wait_for(consolidated, lambda: f"not consolidated: {fleet.log(survivor)[-2000:]}", 60)
        after = utcnow()
        finished: set[object] = set()

        def two_more_checks() -> bool:  # a second consolidation would be one of them
            run = probe.jobs.job_runs().get("consolidation_check")
            if run is not None and run.last_run_at > after:
                finished.add(run.last_run_at)
            return len(finished) >= 2

        wait_for(two_more_checks, "the checks stopped running", 60)
        [now_leader] = [i for i in fleet.instances() if "leader" in i.leases]
        assert now_leader.pid == fleet.procs[survivor].pid
    finally:
        probe.close()
    assert sum(1 for body in list(fake_llm.requests) if consolidation(body)) == 1


def test_polling_is_refused_beside_another_instance(
    fleet: Fleet, fake_llm: FakeOpenAI, fakes: Platforms, balancer: Balancer, database_url: str
) -> None:
    """Telegram allows one getUpdates consumer: of two instances in polling mode started
    at the same moment on one database, exactly one runs and the other exits at start
    (code 2), saying why and what to do instead; so does a third one in webhook mode
    beside the one that polls."""
    configure(fleet, ["gw1", "gw2"], fake_llm, fakes, balancer, telegram_mode="polling")
    configure(fleet, ["gw3"], fake_llm, fakes, balancer)
    procs = {name: fleet.start(name) for name in ("gw1", "gw2")}  # at once
    deadline = time.monotonic() + 90
    while all(p.poll() is None for p in procs.values()):
        assert time.monotonic() < deadline, "neither refused"
        time.sleep(0.1)
    refused = next(n for n, p in procs.items() if p.poll() is not None)
    runs = next(n for n in procs if n != refused)
    assert procs[refused].wait(30) == 2
    said = " ".join(fleet.log(refused).split())
    assert "another gateway runs on this database" in said and "telegram" in said
    assert "webhook mode behind a load balancer" in said and "Traceback" not in said
    fleet.http(runs)  # the other one started and runs on
    assert fleet.procs[runs].poll() is None
    assert fleet.start("gw3").wait(60) == 2  # webhook mode beside the one that polls
    assert "another gateway runs on this database" in fleet.log("gw3")
    assert fleet.procs[runs].poll() is None


def test_merge_and_stop_keep_their_meaning_across_instances(
    fleet: Fleet, fake_llm: FakeOpenAI, fakes: Platforms, balancer: Balancer, database_url: str
) -> None:
    """`queue_mode: merge`: messages that reached another instance while the holder was
    busy are taken by the holder together, as one turn. `/stop` that reaches another
    instance stops the turn the holder runs."""
    names = ["gw1", "gw2"]
    configure(fleet, names, fake_llm, fakes, balancer, gateway="  queue_mode: merge\n")
    slow = {"c1m0", "c2m0"}

    def respond(body: dict[str, Any]) -> Reply:
        reply = echo(body)
        mark = (reply.text or "").removeprefix("re ")
        return Reply(text=reply.text, delay=4.0 if mark in slow else 0.0)

    fake_llm.responder = respond
    first, second = start_fleet(fleet, names, balancer)
    balancer.backends[:] = [first]
    say(fakes, 1, "first c1m0")
    wait_for(lambda: any("1001" in n for i in fleet.instances() for n in i.leases), "no lease", 20)
    balancer.backends[:] = [second]  # what follows reaches the instance not holding it
    say(fakes, 1, "then c1m1")
    say(fakes, 1, "and c1m2")
    wait_for(lambda: len(replies(fakes, 1)) >= 2, lambda: f"{replies(fakes, 1)}", 30)
    assert replies(fakes, 1) == ["re c1m0", "re c1m1"]  # c1m1 and c1m2: one turn
    merged = [b for b in list(fake_llm.requests) if "c1m2" in json.dumps(b)]
    assert len(merged) == 1
    # /stop at the other instance
    say(fakes, 2, "slow c2m0")  # reaches the second instance, which takes the session
    holder = fleet.procs["gw2"].pid

    def held_by_second() -> bool:
        return any("1002" in n for i in fleet.instances() if i.pid == holder for n in i.leases)

    wait_for(held_by_second, "the second instance never took the session", 20)
    balancer.backends[:] = [first]
    say(fakes, 2, "/stop")
    wait_for(lambda: bool(replies(fakes, 2)), "no answer to /stop", 20)
    assert replies(fakes, 2)[0].startswith("Stopped.")
    wait_for(fleet.settled, lambda: f"the stopped turn still runs: {fleet.dump()}", 30)
    assert replies(fakes, 2) == [replies(fakes, 2)[0]]  # the stopped turn sent nothing


def test_slack_socket_mode_with_a_connection_per_instance_answers_each_event_once(
    fleet: Fleet, fake_llm: FakeOpenAI, fakes: Platforms, balancer: Balancer, database_url: str
) -> None:
    """Socket Mode: each instance opens its own connection. Slack gives an event to one
    of them (and again after a missing ack); this fake sends every event to every
    connection, the harder case: each is still answered once."""
    names = ["gw1", "gw2"]
    configure(fleet, names, fake_llm, fakes, balancer, slack_mode="socket", slack_events=False)
    fake_llm.responder = echo
    start_fleet(fleet, names, balancer)
    fakes.slack.wait_connected(2)
    chats = [20, 21, 22, 23]
    for n in range(3):
        for chat in chats:
            say(fakes, chat, f"socket c{chat}m{n}")
    wait_for(
        lambda: all(len(replies(fakes, c)) >= 3 for c in chats),
        lambda: f"{ {c: replies(fakes, c) for c in chats} }",
        60,
    )
    wait_for(fleet.settled, lambda: f"turns still running: {fleet.dump()}", 60)
    for chat in chats:
        assert replies(fakes, chat) == [f"re c{chat}m{n}" for n in range(3)]
    assert sorted(marks_asked(fake_llm)) == sorted(f"c{c}m{n}" for c in chats for n in range(3))


def test_a_rolling_restart_under_traffic_loses_nothing_and_keeps_each_chat_in_order(
    fleet: Fleet, fake_llm: FakeOpenAI, fakes: Platforms, balancer: Balancer
) -> None:
    """Three instances behind the balancer; every instance in turn is stopped (SIGTERM,
    as systemd and Kubernetes stop them) while 30 Telegram chats each write 4 messages
    0.5 s apart, and started again: every message answered exactly once, each chat's
    replies in the order sent. A stopping instance takes no new work, hands its sessions over
    as their running turns end, and never answers a session's newer message after an
    older one is handed on."""
    names = ["gw1", "gw2", "gw3"]
    configure(
        fleet,
        names,
        fake_llm,
        fakes,
        balancer,
        lease_s=15.0,
        only_telegram=True,
        slack_events=False,
        gateway="  stop_grace_seconds: 4\n",  # enough for a running turn, not for a queue
    )

    def respond(body: dict[str, Any]) -> Reply:  # turns in flight and queued at every stop
        return Reply(text=echo(body).text, delay=1.0)

    fake_llm.responder = respond
    urls = dict(zip(names, start_fleet(fleet, names, balancer), strict=True))
    chats, per_wave = range(30), 4
    per_chat = per_wave * len(names)

    def wave(number: int) -> list[threading.Thread]:
        """Each chat sends its next `per_wave` messages, 0.5 s apart."""

        def chat_sends(chat: int) -> None:
            for n in range(number * per_wave, (number + 1) * per_wave):
                fakes.telegram.user_message(f"message c{chat}m{n} please", user_id=2000 + chat)
                time.sleep(0.5)

        senders = [threading.Thread(target=chat_sends, args=(c,)) for c in chats]
        for sender in senders:
            sender.start()
        return senders

    def busy(name: str) -> bool:  # it holds sessions: its stop meets turns and queues
        found = fleet.instance_of(name)
        return found is not None and any(n.startswith("session:") for n in found.leases)

    for number, name in enumerate(names):  # one after the other, each under traffic
        senders = wave(number)
        wait_for(lambda n=name: busy(n), f"{name} never took a session", 30)
        proc = fleet.procs[name]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, fleet.log(name)[-3000:]
        assert "Traceback" not in fleet.log(name), fleet.log(name)[-3000:]
        balancer.backends.remove(urls[name])
        fleet.start(name)
        urls[name] = fleet.http(name)
        balancer.backends.append(urls[name])
        for sender in senders:  # a chat's next wave comes after this one
            sender.join()

    def answers(chat: int) -> list[str]:
        posts = list(fakes.telegram.posts)
        return [str(p.get("text", "")) for c, _, p in posts if c == 2000 + chat]

    def done() -> bool:
        return all(len(answers(c)) >= per_chat for c in chats)

    def waiting() -> str:
        short = {c: answers(c) for c in chats if len(answers(c)) < per_chat}
        return f"waiting: {short}; {fleet.dump()}"

    wait_for(done, waiting, 120)
    wait_for(fleet.settled, lambda: f"turns still running: {fleet.dump()}", 60)
    for chat in chats:
        assert answers(chat) == [f"re c{chat}m{n}" for n in range(per_chat)], answers(chat)


def test_matrix_and_mattermost_are_leased_and_taken_over_with_what_came_meanwhile(
    *,
    fleet: Fleet,
    fake_llm: FakeOpenAI,
    fakes: Platforms,
    balancer: Balancer,
    matrix: FakeMatrix,
    mattermost: FakeMattermost,
) -> None:
    """Both declared leased: one instance syncs Matrix and one holds Mattermost's
    websocket; when the holder of both is killed, the other takes both over and answers
    what was written while no instance listened, once (from the marks in PostgreSQL)."""
    names = ["gw1", "gw2"]
    sections = (
        f"  matrix:\n    enabled: true\n    homeserver: {matrix.url}\n"
        f"    user_id: '{MATRIX_BOT}'\n"
        f"  mattermost:\n    enabled: true\n    url: {mattermost.url}\n"
    )
    configure(fleet, names, fake_llm, fakes, balancer, only_telegram=True, extra=sections)
    fake_llm.responder = echo
    try:
        leased_and_taken_over(fleet, names, balancer, matrix, mattermost)
    finally:
        fleet.stop_all()  # before the fakes stop (their fixtures end before the fleet's)


def leased_and_taken_over(
    fleet: Fleet,
    names: list[str],
    balancer: Balancer,
    matrix: FakeMatrix,
    mattermost: FakeMattermost,
) -> None:
    start_fleet(fleet, names, balancer)
    ann, bob = matrix_user("ann"), "b0b00000000000000000000000"

    def holder(platform: str) -> str | None:
        return lease_holder(fleet, names, platform)

    wait_for(lambda: holder("matrix") is not None and holder("mattermost") is not None,
             lambda: f"no lease holders: {fleet.dump()}", 60)  # fmt: skip
    mattermost.wait_connected()

    def answered() -> list[str]:
        on_matrix = [str(e["content"].get("body")) for e in matrix.sent(matrix.dm(ann))]
        return on_matrix + mattermost.texts(f"dm-{bob}")

    matrix.say(ann, "hello c1m0")
    mattermost.say(bob, "hello c2m0")
    wait_for(lambda: len(answered()) >= 2, lambda: f"{answered()}; {fleet.dump()}", 60)
    victim = holder("matrix")
    assert victim is not None
    holder_at_start = holder("mattermost")
    fleet.kill(victim)
    if holder_at_start == victim:  # killed too: nobody listens until the take-over
        mattermost.say(bob, "meanwhile c2m1", live=False)
    else:
        mattermost.say(bob, "meanwhile c2m1")
    matrix.say(ann, "meanwhile c1m1")  # no instance syncs now
    wait_for(lambda: len(answered()) >= 4, lambda: f"{answered()}; {fleet.dump()}", 90)
    survivor = next(n for n in names if n != victim)
    wait_for(lambda: holder("mattermost") == survivor, fleet.dump, 30)
    mattermost.wait_connected(2 if holder_at_start == victim else 1, 30)
    # one more message in each chat: each chat's line is in order, so its answer comes
    # after anything caught up (a message answered twice would show before it)
    matrix.say(ann, "later c1m2")
    mattermost.say(bob, "later c2m2")
    wait_for(lambda: len(answered()) >= 6, lambda: f"{answered()}; {fleet.dump()}", 60)
    on_matrix = [str(e["content"].get("body")) for e in matrix.sent(matrix.dm(ann))]
    assert on_matrix == ["re c1m0", "re c1m1", "re c1m2"]
    assert mattermost.texts(f"dm-{bob}") == ["re c2m0", "re c2m1", "re c2m2"]
    assert holder("matrix") == survivor


def lease_holder(fleet: Fleet, names: list[str], platform: str) -> str | None:
    """Which of `names` holds `platform`'s connection lease now (never two at once)."""
    found = [i for i in fleet.instances() if i.alive and f"platform:{platform}" in i.leases]
    assert len(found) <= 1, fleet.dump()
    return next((n for n in names if found and fleet.procs[n].pid == found[0].pid), None)


ADMIN, STRANGER = "a1ice000000000000000000000", "s7ranger000000000000000000"


def pairing_fleet(
    fleet: Fleet, names: list[str], *, fake_llm: FakeOpenAI, fakes: Platforms,
    balancer: Balancer, mattermost: FakeMattermost,
) -> dict[str, str]:  # fmt: skip
    """`names` on Mattermost with buttons through the balancer, pairing on and ADMIN an
    admin there; started: their base URLs by name."""
    section = (
        f"  mattermost:\n    enabled: true\n    url: {mattermost.url}\n"
        f"    actions_url: {balancer.url}/mattermost/actions\n"
    )
    configure(
        fleet, names, fake_llm, fakes, balancer, only_telegram=True, extra=section,
        access="  allow_all: false\n  pairing: true\n",
    )  # fmt: skip
    db = SessionDB.open(fleet.home("probe"), fleet.database_url)
    try:
        db.people.ensure_user("u_00000000000000ad", role="admin", display_name="Ann Admin")
        db.people.ensure_identity("mattermost", ADMIN, "u_00000000000000ad")
    finally:
        db.close()
    fake_llm.responder = echo
    urls = dict(zip(names, start_fleet(fleet, names, balancer), strict=True))
    wait_for(lambda: lease_holder(fleet, names, "mattermost") is not None, fleet.dump, 60)
    return urls


def approved_by_a_press_at(fleet: Fleet, mattermost: FakeMattermost, url: str) -> None:
    """A stranger asks to be let in; the admin presses Approve, the press POSTed to the
    instance at `url`: it is taken there (never "press again"), and decided."""
    mattermost.say(STRANGER, "hello, may I?")

    def asked() -> list[str]:
        return [str(p["id"]) for p in mattermost.bot_posts(f"dm-{ADMIN}")
                if str(p["id"]) in mattermost.first_actions]  # fmt: skip

    wait_for(lambda: bool(asked()), lambda: f"no buttons: {mattermost.texts(f'dm-{ADMIN}')}", 60)
    (message,) = asked()
    approve = next(
        n
        for n, action in enumerate(mattermost.first_actions[message])
        if action["integration"]["context"]["command"].startswith("/admin approve")
    )
    pressed = mattermost.press(message, approve, ADMIN, to=url)
    assert pressed is not None and pressed[0] == 200, pressed
    assert "press again" not in json.dumps(pressed[1]), pressed
    wait_for(
        lambda: "Approved by" in str(mattermost.posts[message]["message"]),
        lambda: f"not approved: {mattermost.posts[message]['message']}; {fleet.dump()}",
        60,
    )
    wait_for(
        lambda: any("approved" in t for t in mattermost.texts(f"dm-{STRANGER}")),
        lambda: f"the stranger was not told: {mattermost.texts(f'dm-{STRANGER}')}",
        60,
    )


def test_a_mattermost_press_reaching_the_instance_without_the_websocket_is_taken(
    *,
    fleet: Fleet,
    fake_llm: FakeOpenAI,
    fakes: Platforms,
    balancer: Balancer,
    mattermost: FakeMattermost,
) -> None:
    """A button's press is POSTed to the actions URL, which a balancer sends to any
    instance: the one that does not hold the websocket takes it (here: an admin approves
    a stranger's pairing) instead of asking to press again."""
    names = ["gw1", "gw2"]
    try:
        urls = pairing_fleet(
            fleet, names, fake_llm=fake_llm, fakes=fakes, balancer=balancer, mattermost=mattermost
        )
        mattermost.wait_connected()
        standby = next(n for n in names if n != lease_holder(fleet, names, "mattermost"))
        approved_by_a_press_at(fleet, mattermost, urls[standby])
    finally:
        fleet.stop_all()


def test_an_instance_that_lost_the_mattermost_lease_stands_by_and_takes_presses(
    *,
    fleet: Fleet,
    fake_llm: FakeOpenAI,
    fakes: Platforms,
    balancer: Balancer,
    mattermost: FakeMattermost,
) -> None:
    """The websocket's holder stalls past its lease (SIGSTOP): the other instance takes
    the lease and connects; the stalled one, running again, finds its lease lost,
    disconnects and stands by, and still takes the presses sent to it."""
    names = ["gw1", "gw2"]
    try:
        urls = pairing_fleet(
            fleet, names, fake_llm=fake_llm, fakes=fakes, balancer=balancer, mattermost=mattermost
        )
        mattermost.wait_connected()
        stalled = lease_holder(fleet, names, "mattermost")
        assert stalled is not None
        other = next(n for n in names if n != stalled)
        os.kill(fleet.procs[stalled].pid, signal.SIGSTOP)
        try:
            wait_for(
                lambda: lease_holder(fleet, names, "mattermost") == other,
                lambda: f"not taken over by {other}: {fleet.dump()}",
                60,
            )
            mattermost.wait_connected(2)
        finally:
            os.kill(fleet.procs[stalled].pid, signal.SIGCONT)

        def standing_by() -> bool:
            mine = [i for i in fleet.instances() if i.pid == fleet.procs[stalled].pid]
            said = str(mine[0].info.get("platforms", {}).get("mattermost", "")) if mine else ""
            return said.startswith("standby") and "pushed here is taken" in said

        wait_for(
            standing_by,
            lambda: f"{stalled} not on standby: {[i.info for i in fleet.instances()]}",
            60,
        )
        assert lease_holder(fleet, names, "mattermost") == other  # never two at once
        approved_by_a_press_at(fleet, mattermost, urls[stalled])
    finally:
        fleet.stop_all()
