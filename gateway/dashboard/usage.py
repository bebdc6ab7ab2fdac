"""The Usage page's figures: tokens (and, where `llm.prices` names the model, cost) per
day, per person and per model over a span of UTC days, from state.db's `usage_days`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, timedelta

from gateway.dashboard.chart import Chart, daily_chart
from hermes.config import LLMConfig
from hermes.state.db import SessionDB
from hermes.state.usage import Used

SPANS = (1, 7, 30, 90)  # days the page offers


@dataclass(slots=True)
class Sum:
    """Tokens and calls of one day, person or model; `cost` counts the priced ones alone
    (`unpriced`: tokens of models with no price)."""

    key: str
    prompt: int = 0
    completion: int = 0
    calls: int = 0
    cost: float = 0.0
    unpriced: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion


@dataclass(frozen=True, slots=True)
class Report:
    days: int
    since: date
    total: Sum
    people: list[Sum]  # the most tokens first
    models: list[Sum]
    chart: Chart
    currency: str
    priced: bool  # some model has a price


class Pricing:
    def __init__(self, llm: LLMConfig) -> None:
        self.prices, self.fallback = llm.prices, llm.model or ""

    def cost(self, used: Used) -> float | None:
        """Its cost, or None for a model with no price (a count from before the model was
        recorded is priced as the configured model)."""
        price = self.prices.get(used.model or self.fallback)
        if price is None:
            return None
        return (used.prompt * price.input + used.completion * price.output) / 1e6


def report(db: SessionDB, llm: LLMConfig, today: date, days: int, user_id: str = "") -> Report:
    """`days` days ending `today` (UTC): everyone's, or one person's."""
    since = today - timedelta(days=days - 1)
    pricing = Pricing(llm)
    per_day = _sums(db.usage.totals("day", since, user_id), pricing, lambda u: u.key)
    rows = db.usage.totals("person", since, user_id)
    per_person = _sums(rows, pricing, lambda u: u.key)
    models = _sums(rows, pricing, lambda u: u.model or pricing.fallback)
    return Report(
        days=days,
        since=since,
        total=_sums(rows, pricing, lambda _: "all").get("all", Sum("all")),
        people=sorted(per_person.values(), key=lambda s: (-s.tokens, s.key)),
        models=sorted(models.values(), key=lambda s: -s.tokens),
        chart=daily_chart({k: s.tokens for k, s in per_day.items()}, today, days, "tokens"),
        currency=llm.currency,
        priced=bool(llm.prices),
    )


def _sums(rows: Iterable[Used], pricing: Pricing, key: Callable[[Used], str]) -> dict[str, Sum]:
    """`rows` added up by `key` (a day, a person, a model, or one key for all)."""
    sums: dict[str, Sum] = {}
    for used in rows:
        one = sums.setdefault(key(used), Sum(key(used)))
        one.prompt += used.prompt
        one.completion += used.completion
        one.calls += used.calls
        cost = pricing.cost(used)
        if cost is None:
            one.unpriced += used.prompt + used.completion
        else:
            one.cost += cost
    return sums
