"""Budget usage put straight into admission's counters in Redis, as a gateway's release leaves it."""

from __future__ import annotations

import datetime as dt

import redis

from fairness.models import Budget
from fairness.store import keyspace
from fairness.telemetry import budget_status
from tests.support.redis_db import TEST_REDIS_URL


def use(budget: Budget, used: float, reserved: float = 0.0) -> None:
    """Settled and reserved weighted tokens in the budget's current window."""
    now = dt.datetime.now(dt.UTC).timestamp()
    window = budget_status.window_of(budget, now)
    namespace = keyspace.admission_namespace(keyspace.PREFIX)
    client = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        assert not window.rolling_seconds, "a calendar budget's single counter only"
        client.hset(namespace + keyspace.ADMISSION_BUDGET_WINDOW + window.field, mapping={
            keyspace.ADMISSION_FIELD_BUDGET_SETTLED: repr(used),
            keyspace.ADMISSION_FIELD_BUDGET_RESERVED: repr(reserved),
        })
    finally:
        client.close()
