"""Small server-rendered SVG bar charts (no script, no chart library: rectangles and
their labels): messages per hour over the last day, tokens per day."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

HOURS = 24
WIDTH, HEIGHT, BAR_GAP = 480, 120, 2
LABEL_SPACE = 20  # room for the hour labels (16 units on a phone)


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    count: int
    label: str  # "14:00" (every sixth hour), "07 Dec" (about six days of a span)
    title: str  # the hour and its count, for a tooltip and a screen reader


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: tuple[Bar, ...]
    total: int
    peak: int


def hourly_chart(per_hour: dict[str, int], now: datetime) -> Chart:
    """The last HOURS hours ending with the current one; `per_hour` is keyed
    "YYYY-MM-DD HH" (UTC), as `ConversationDB.activity` gives it."""
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS - 1)
    hours = [start + timedelta(hours=i) for i in range(HOURS)]
    counts = [per_hour.get(f"{h:%Y-%m-%d %H}", 0) for h in hours]
    return bar_chart(
        counts,
        [f"{h:%H}:00" if h.hour % 6 == 0 else "" for h in hours],
        [
            f"{h:%H}:00 UTC: {n} message{'s' if n != 1 else ''}"
            for h, n in zip(hours, counts, strict=True)
        ],
    )


def daily_chart(per_day: dict[str, int], last: date, days: int, unit: str) -> Chart:
    """`days` days ending with `last`; `per_day` keyed "YYYY-MM-DD" (UTC); about six
    days labelled, whatever the span."""
    dates = [last - timedelta(days=days - 1 - i) for i in range(days)]
    counts = [per_day.get(d.isoformat(), 0) for d in dates]
    every = max(1, days // 6)
    return bar_chart(
        counts,
        [f"{d:%d %b}" if i % every == 0 else "" for i, d in enumerate(dates)],
        [f"{d:%a %d %b}: {n:,} {unit}" for d, n in zip(dates, counts, strict=True)],
    )


def bar_chart(counts: list[int], labels: list[str], titles: list[str]) -> Chart:
    """One bar per count, scaled to the highest, each with its label (or none) and title."""
    peak = max(counts, default=0) or 1
    slot = WIDTH / max(1, len(counts))
    plot = HEIGHT - LABEL_SPACE
    bars = []
    for i, (count, label, title) in enumerate(zip(counts, labels, titles, strict=True)):
        height = plot * count / peak
        bars.append(
            Bar(
                x=round(i * slot + min(BAR_GAP, slot / 4) / 2, 1),
                y=round(plot - height, 1),
                width=round(slot - min(BAR_GAP, slot / 4), 1),
                height=round(height, 1),
                count=count,
                label=label,
                title=title,
            )
        )
    return Chart(WIDTH, HEIGHT, tuple(bars), sum(counts), max(counts, default=0))
