"""Budgets and rate limits as admission checks them (lua/lib/limits.lua), in the same round trip that
queues or grants the request.

A budget window is a Redis counter of settled weighted tokens plus one of reservations: a request
is refused when the window's used + reserved has reached its limit, else reserves its estimate,
and its release settles the real count. Concurrent requests can so overshoot by no more than what
is in flight, across any number of gateway processes. A rate limit is GCRA (the generic cell rate
algorithm): one timestamp per limit, no per-request state.

Pure Python: no Django, no Redis.
"""

from __future__ import annotations

from dataclasses import dataclass

ROLLING_BUCKETS = 24  # a rolling window is this many buckets (so it slides in 1/24 steps)


@dataclass(frozen=True)
class BudgetWindow:
    """One budget's current window, as one request sees it. Its counters are its holder's for
    the period (`counter`), not the budget row's: a raise and the standing budget it replaces for
    a while count the same tokens."""

    budget_id: int
    counter: str  # the holder and period, e.g. "a12-month", "k7-r24"
    limit: float  # weighted tokens
    window_start: float  # epoch seconds (calendar periods); ignored when rolling
    resets_at: float  # epoch seconds: when a refused request may try again
    rolling_seconds: float = 0.0  # > 0: a rolling window of this length
    words: str = ""  # "project nlp-lab has used its 5.0 M tokens for December": for the 429

    @property
    def field(self) -> str:
        if self.rolling_seconds > 0:
            bucket = max(1, round(self.rolling_seconds / ROLLING_BUCKETS))
            return f"{self.counter}|r{bucket}"
        return f"{self.counter}|{int(self.window_start)}"

    def ttl(self, now: float) -> float:
        """How long its counters must live: past the window's end, plus a day to read them."""
        if self.rolling_seconds > 0:
            return self.rolling_seconds * (1 + 1 / ROLLING_BUCKETS) + 86_400
        return max(0.0, self.resets_at - now) + 86_400


@dataclass(frozen=True)
class RateLimit:
    """At most `per_minute` requests (or weighted tokens, when `tokens`) a minute for `name`."""

    name: str  # "k<key id>|rpm", "t<tier>|tpm", ...
    per_minute: float
    tokens: bool = False
    words: str = ""  # "this key's 100 requests a minute"


@dataclass(frozen=True)
class CompletionAsk:
    """A budgeted request's completion, for admission to limit to what its budgets leave: the
    estimate is then its weighted prompt plus the granted limit at `weight` a token."""

    prompt: float  # weighted prompt tokens (estimated)
    weight: float  # weighted tokens of one completion token
    most: int  # the most it would run to: its own limit, or what the context leaves
    least: int  # the least worth running: below this it is refused as over budget

    def spec(self) -> str:
        return f"{self.prompt:.17g}~{self.weight:.17g}~{self.most}~{self.least}"

    def estimate(self, limit: int) -> float:
        return self.prompt + limit * self.weight


def budget_spec(windows: tuple[BudgetWindow, ...], now: float) -> str:
    return ",".join(f"{w.field}~{w.ttl(now):.0f}~{w.limit:.17g}" for w in windows)


def rate_spec(limits: tuple[RateLimit, ...]) -> str:
    return ",".join(f"{r.name}~{r.per_minute:.17g}~{int(r.tokens)}" for r in limits)
