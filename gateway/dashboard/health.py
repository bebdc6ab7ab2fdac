"""Each platform's health over a span of time, from the spans the gateways recorded
(hermes/state/platform_health.py): when it was up (on at least one instance), down
(no instance had it, one at least was trying: an outage), or when no gateway ran at all;
its uptime over the time a gateway watched, its outages with why, and a strip chart."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gateway.dashboard.problems import bad_state
from hermes.state.models import PlatformSpan

WIDTH, HEIGHT = 480, 16  # the strip chart, in SVG units
MIN_MARK = 1.0  # an outage of seconds still shows as a line on the strip
SPANS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


def span_state(state: str) -> tuple[str, str] | None:
    """What a platform's connection state (as `hermes gateway status` says it) is over
    time: ("up", ""), ("down", why), ("standby", whose) or None (starting, off: not a
    state a platform is in for long, not recorded)."""
    if state == "connected":
        return "up", ""
    if state.startswith("standby"):
        return "standby", state.partition(": ")[2]
    if bad_state(state):  # "failed: why (retrying in 8 s)": the why, not the countdown
        return "down", state.partition(": ")[2].split(" (retrying")[0]
    return None


@dataclass(frozen=True, slots=True)
class Stretch:
    start: datetime
    end: datetime
    state: str  # "up", "down" or "none" (no gateway reported the platform)
    detail: str = ""  # why it was down (the first reason given)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True, slots=True)
class Mark:
    x: float
    width: float
    state: str
    title: str


@dataclass(frozen=True, slots=True)
class PlatformHealth:
    name: str
    stretches: tuple[Stretch, ...]
    ongoing: bool  # its last stretch lasts until now (a gateway still reports it)

    def _total(self, state: str) -> float:
        return sum(s.seconds for s in self.stretches if s.state == state)

    @property
    def up_s(self) -> float:
        return self._total("up")

    @property
    def down_s(self) -> float:
        return self._total("down")

    @property
    def unwatched_s(self) -> float:
        return self._total("none")

    @property
    def uptime(self) -> float | None:
        """The share of the time a gateway watched it that it was up (None: never watched)."""
        watched = self.up_s + self.down_s
        return self.up_s / watched if watched > 0 else None

    @property
    def outages(self) -> list[Stretch]:
        """Its stretches down, the newest first."""
        return sorted((s for s in self.stretches if s.state == "down"), key=lambda s: s.start)[::-1]

    @property
    def down_now(self) -> bool:
        return self.ongoing and bool(self.stretches) and self.stretches[-1].state == "down"

    def strip(self, since: datetime, until: datetime) -> list[Mark]:
        """The strip chart's marks: one per stretch, placed on `since`..`until`."""
        window = (until - since).total_seconds() or 1.0
        marks = []
        for s in self.stretches:
            x = WIDTH * (s.start - since).total_seconds() / window
            width = WIDTH * s.seconds / window
            if s.state == "down":
                width = max(width, MIN_MARK)
            title = (
                f"{s.start:%d %b %H:%M}–{s.end:%H:%M} UTC: "
                + {
                    "up": "up",
                    "down": f"down ({s.detail})" if s.detail else "down",
                    "none": "no gateway running",
                }[s.state]
            )
            marks.append(Mark(round(x, 2), round(width, 2), s.state, title))
        return marks


def health(
    spans: Iterable[PlatformSpan], since: datetime, until: datetime, *, open_within: timedelta
) -> list[PlatformHealth]:
    """Each platform's stretches over `since`..`until` from every instance's spans: up
    when at least one instance had it up, down when none had it up and one at least
    reported it (down, or on standby for a holder that is not up), else no gateway.
    A span not ended and renewed within `open_within` of `until` lasts until `until`
    (a gateway still reports it: the platform is `ongoing`)."""
    by_platform: dict[str, list[PlatformSpan]] = {}
    for span in spans:
        by_platform.setdefault(span.platform, []).append(span)
    return [
        _health(name, found, since, until, open_within)
        for name, found in sorted(by_platform.items())
    ]


def _health(
    name: str, spans: list[PlatformSpan], since: datetime, until: datetime, fresh: timedelta
) -> PlatformHealth:
    def open_now(span: PlatformSpan) -> bool:  # renewed lately, not ended: so until now
        return not span.ended and span.until >= until - fresh

    ongoing = any(open_now(span) for span in spans)
    clipped = [
        (max(span.since, since), until if open_now(span) else min(span.until, until), span)
        for span in spans
    ]
    clipped = [(start, end, span) for start, end, span in clipped if end > start]
    # a sweep over the spans' ends, with the spans in force between each two
    edges = sorted(
        [(start, 1, i) for i, (start, _, _) in enumerate(clipped)]
        + [(end, 0, i) for i, (_, end, _) in enumerate(clipped)]
    )  # at one moment the ends come before the starts
    stretches: list[Stretch] = []
    active: set[int] = set()
    at = since
    for when, starts, i in edges:
        if when > at:
            _extend(stretches, _in_force(at, when, [clipped[j][2] for j in sorted(active)]))
            at = when
        (active.add if starts else active.discard)(i)
    if at < until:
        _extend(stretches, Stretch(at, until, "none"))
    return PlatformHealth(name, tuple(stretches), ongoing)


def _in_force(start: datetime, end: datetime, spans: list[PlatformSpan]) -> Stretch:
    if any(span.state == "up" for span in spans):
        return Stretch(start, end, "up")
    if not spans:
        return Stretch(start, end, "none")
    why = next((span.detail for span in spans if span.state == "down" and span.detail), "")
    return Stretch(start, end, "down", why)


def _extend(stretches: list[Stretch], stretch: Stretch) -> None:
    """Add `stretch`, joined to the last one when they say the same (its first why kept)."""
    if stretches and stretches[-1].state == stretch.state and stretches[-1].end == stretch.start:
        last = stretches[-1]
        stretches[-1] = Stretch(last.start, stretch.end, last.state, last.detail or stretch.detail)
    else:
        stretches.append(stretch)
