"""Each platform's health over time: the spans a gateway records in state.db (on both
backends), and what the dashboard makes of them (uptime, outages with why, the time no
gateway ran), with one instance, several, a crash and a clean stop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from gateway.dashboard.health import PlatformHealth, health, span_state
from gateway.uptime import UptimeLog
from hermes.state.db import SessionDB
from hermes.state.platform_health import OPEN_WITHIN, OpenSpan
from tests.harness.wait import until

T0 = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)


def at(hours: float) -> datetime:
    return T0 + hours * H


class Instance:
    """One gateway instance's record, written at chosen times."""

    def __init__(self, db: SessionDB, name: str) -> None:
        self.db, self.name = db, name
        self.opened: dict[str, OpenSpan] = {}

    def says(self, hours: float, **states: str) -> None:
        told = {name: found for name, said in states.items() if (found := span_state(said))}
        self.opened = self.db.platform_health.record(self.name, told, self.opened, at(hours))


def seen(db: SessionDB, since: float, now: float) -> dict[str, PlatformHealth]:
    spans = db.platform_health.spans(at(since))
    found = health(spans, at(since), at(now), open_within=OPEN_WITHIN)
    return {p.name: p for p in found}


@pytest.mark.parametrize(
    ("said", "state"),
    [
        ("connected", ("up", "")),
        (
            "standby: the connection is held by h2:77:ab12",
            ("standby", "the connection is held by h2:77:ab12"),
        ),
        (
            "failed: NetworkError: Bad Gateway (retrying in 8 s)",
            ("down", "NetworkError: Bad Gateway"),
        ),
        ("failed: InvalidToken: Unauthorized", ("down", "InvalidToken: Unauthorized")),
        ("reconnecting: no heartbeat for 60 s", ("down", "no heartbeat for 60 s")),
        ("lost: the websocket closed (4004)", ("down", "the websocket closed (4004)")),
        ("starting", None),
        ("off", None),
    ],
)
def test_what_a_platform_state_is_over_time(said: str, state: tuple[str, str] | None) -> None:
    assert span_state(said) == state


def test_an_outage_is_kept_with_why_and_counted_against_the_time_watched(db: SessionDB) -> None:
    gw = Instance(db, "h1:100")
    gw.says(0, telegram="connected", slack="connected")
    for hour in range(1, 10):  # renewed every so often while it lasts: one span
        gw.says(hour, telegram="connected", slack="connected")
    gw.says(10, telegram="failed: NetworkError: Bad Gateway (retrying in 1 s)", slack="connected")
    gw.says(10.5, telegram="failed: NetworkError: Bad Gateway (retrying in 4 s)", slack="connected")
    gw.says(11, telegram="connected", slack="connected")
    gw.says(12, telegram="connected", slack="connected")
    assert len(db.platform_health.spans(at(0))) == 4  # telegram up, down, up; slack up

    found = seen(db, 0, 12)
    telegram = found["telegram"]
    assert [(s.state, s.seconds / 3600) for s in telegram.stretches] == [
        ("up", 10),
        ("down", 1),
        ("up", 1),
    ]
    assert telegram.uptime == pytest.approx(11 / 12)
    (outage,) = telegram.outages
    assert (outage.start, outage.end, outage.detail) == (
        at(10),
        at(11),
        "NetworkError: Bad Gateway",
    )
    assert found["slack"].uptime == 1 and found["slack"].outages == []
    assert telegram.ongoing and not telegram.down_now  # renewed now: still reported

    later = seen(db, 0, 15)  # nothing renewed for 3 h: the gateway is gone (a crash)
    assert not later["telegram"].ongoing
    assert later["telegram"].unwatched_s == 3 * 3600
    assert later["telegram"].uptime == pytest.approx(11 / 12)  # not counted as down


def test_with_several_instances_a_platform_is_up_while_any_has_it(db: SessionDB) -> None:
    one, two = Instance(db, "h1:1:aa"), Instance(db, "h2:2:bb")
    one.says(0, discord="connected")
    two.says(0, discord="standby: the connection is held by h1:1:aa")
    one.says(2, discord="failed: ConnectionClosed")  # the holder fails...
    two.says(2.5, discord="connected")  # ...and the other takes the connection over
    one.says(3, discord="standby: the connection is held by h2:2:bb")
    two.says(4, discord="connected")
    one.says(4, discord="standby: the connection is held by h2:2:bb")

    (discord,) = seen(db, 0, 4).values()
    assert [(s.state, s.seconds / 3600, s.detail) for s in discord.stretches] == [
        ("up", 2, ""),
        ("down", 0.5, "ConnectionClosed"),  # nobody had it: an outage, with the one why
        ("up", 1.5, ""),
    ]


def test_a_clean_stop_ends_the_spans_and_a_span_renewed_lately_lasts_until_now(
    db: SessionDB,
) -> None:
    gw = Instance(db, "h1:5")
    gw.says(0, telegram="connected")
    gw.says(1, telegram="connected")
    now = at(1) + OPEN_WITHIN / 2  # the renewal is due any moment
    (telegram,) = health(db.platform_health.spans(at(0)), at(0), now, open_within=OPEN_WITHIN)
    assert [s.state for s in telegram.stretches] == ["up"] and telegram.uptime == 1
    gw.says(1, telegram="starting")  # a restart's platform: starting is no state; ended
    gw.says(1.01)  # the stop: every span ended
    assert all(span.ended for span in db.platform_health.spans(at(0)))
    (telegram,) = health(db.platform_health.spans(at(0)), at(0), now, open_within=OPEN_WITHIN)
    assert not telegram.ongoing and telegram.stretches[-1].state == "none"


def test_the_strip_places_each_stretch_and_shows_a_short_outage(db: SessionDB) -> None:
    gw = Instance(db, "h1:9")
    gw.says(0, slack="connected")
    gw.says(12, slack="lost: socket closed")
    gw.says(12 + 1 / 3600, slack="connected")  # down one second
    gw.says(24, slack="connected")
    (slack,) = seen(db, 0, 24).values()
    marks = slack.strip(at(0), at(24))
    assert [m.state for m in marks] == ["up", "down", "up"]
    assert marks[1].x == 240 and marks[1].width >= 1  # a second still shows as a line
    assert "down (socket closed)" in marks[1].title


def test_old_spans_are_forgotten_after_ninety_days(db: SessionDB) -> None:
    gw = Instance(db, "h1:3")
    gw.says(0, telegram="connected")
    gw.says(1)
    assert db.platform_health.prune(at(24 * 89)) == 0
    assert db.platform_health.prune(at(24 * 91)) == 1
    assert db.platform_health.spans(at(-1)) == []


def test_the_gateway_records_a_change_at_once_and_renews_what_lasts(db: SessionDB) -> None:
    """UptimeLog as the runtime uses it: told every state it publishes (a retry's
    countdown changes the words, not the state), it writes a change within moments,
    renews on its own, and a stop ends its spans."""

    async def scenario() -> None:
        log = UptimeLog(db, "h1:42", renew_s=0.2)
        log.start()
        log.note({"telegram": "starting"})
        log.note({"telegram": "failed: NetworkError: Bad Gateway (retrying in 1 s)"})
        await until(lambda: len(db.platform_health.spans(at(0))) == 1, "the outage written", 10)
        log.note({"telegram": "failed: NetworkError: Bad Gateway (retrying in 2 s)"})
        log.note({"telegram": "connected"})
        await until(lambda: len(db.platform_health.spans(at(0))) == 2, "the recovery written", 10)
        first = db.platform_health.spans(at(0))[1].until
        await until(
            lambda: db.platform_health.spans(at(0))[1].until > first, "the span renewed", 10
        )
        await log.close()
        down, up = db.platform_health.spans(at(0))
        assert (down.state, down.detail, down.ended) == ("down", "NetworkError: Bad Gateway", True)
        assert (up.state, up.ended) == ("up", True)

    asyncio.run(scenario())
