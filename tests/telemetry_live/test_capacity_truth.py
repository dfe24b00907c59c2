"""The published per-user figure matches what users measurably get (real processes)."""

import pytest

from fairness.telemetry import capacity_store
from tests.support.polling import wait_for
from tests.support.telemetry import load_on, poll, running_is


def engine_rate(before: dict, after: dict) -> float:
    return (after["generation_tokens"] - before["generation_tokens"]) / (after["clock"] - before["clock"])


@pytest.mark.long  # engines and the capacity store; no database
def test_the_published_per_user_figure_is_within_15_percent_of_measured(engine):
    measured = {}
    for users in (1, 4, 8):
        load = load_on(engine.url, users=users)
        try:
            running_is(engine, users)
            poll()  # the first rate of this phase would span the change of load
            start = engine.stats()
            for _ in range(5):
                # Space the polls by work done (about half a second at one user), so each rate
                # covers many decode steps and the poller's timing jitter is a small part of it.
                done = engine.stats()["generation_tokens"] + 150 * users
                wait_for(lambda done=done: engine.stats()["generation_tokens"] >= done, timeout=10, interval=0.05)
                poll()
            measured[users] = engine_rate(start, engine.stats()) / users
        finally:
            load.stop()
        wait_for(lambda: engine.stats()["running"] == 0, timeout=10, what="the engine to drain")

    estimate = capacity_store.refit()["sim"]
    assert estimate is not None and estimate.samples >= 10
    for users, per_user in measured.items():
        ratio = estimate.per_user(users) / per_user
        assert 0.85 <= ratio <= 1.15, (users, estimate.per_user(users), per_user)
