"""During a Redis outage every request fails alike: the log gets one traceback per interval and
a count of the rest, not one traceback per request."""

from __future__ import annotations

import logging

import redis.exceptions

from fairness.gateway.asgi import StoreFailureLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_report_per_interval_counting_the_rest(caplog):
    clock = Clock()
    failures = StoreFailureLog(every=10.0, clock=clock)
    error = redis.exceptions.ConnectionError("Connection closed by server")
    with caplog.at_level(logging.ERROR, logger="fairness.gateway.asgi"):
        for _ in range(30):
            failures.report(error)
        clock.now += 10.0
        failures.report(error)
    reports = [r for r in caplog.records if r.name == "fairness.gateway.asgi"]
    assert len(reports) == 2
    assert reports[0].exc_info is not None and "0 more" in reports[0].getMessage()
    assert "29 more" in reports[1].getMessage()
