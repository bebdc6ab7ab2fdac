"""Messages per hour over the last day, as a small server-rendered SVG bar chart (no
script, no chart library: 24 rectangles and their labels)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

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
    label: str  # "14:00", shown for every sixth hour
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
    peak = max(counts) or 1
    slot = WIDTH / HOURS
    plot = HEIGHT - LABEL_SPACE
    bars = []
    for i, (hour, count) in enumerate(zip(hours, counts, strict=True)):
        height = plot * count / peak
        bars.append(
            Bar(
                x=round(i * slot + BAR_GAP / 2, 1),
                y=round(plot - height, 1),
                width=round(slot - BAR_GAP, 1),
                height=round(height, 1),
                count=count,
                label=f"{hour:%H}:00" if hour.hour % 6 == 0 else "",
                title=f"{hour:%H}:00 UTC: {count} message{'s' if count != 1 else ''}",
            )
        )
    return Chart(WIDTH, HEIGHT, tuple(bars), sum(counts), max(counts))
