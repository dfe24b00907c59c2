"""A periodic task's lock: one run at a time, given back only by the run that holds it, and kept
for the task's spacing when it is to run once a period."""

from __future__ import annotations

import pytest
import redis

from fairness.store import keyspace
from fairness.store.task_locks import run_alone
from tests.support.polling import wait_for
from tests.support.redis_db import QUIET_REDIS_URL

TASK = "a-periodic-task"


@pytest.fixture
def client() -> redis.Redis:
    # The quiet database: no live process's beat takes locks there.
    store = redis.Redis.from_url(QUIET_REDIS_URL)
    store.delete(keyspace.task_lock(TASK))
    return store


def test_a_second_run_while_the_first_holds_the_lock_does_nothing(client):
    with run_alone(client, TASK, lifetime=30) as first:
        with run_alone(client, TASK, lifetime=30) as second:
            assert (first, second) == (True, False)
        assert client.get(keyspace.task_lock(TASK)) is not None  # the skipped run left it alone
    assert client.get(keyspace.task_lock(TASK)) is None  # given back by its holder at the end


def test_a_run_that_outlived_its_lock_leaves_the_next_run_s_lock_in_place(client):
    late = run_alone(client, TASK, lifetime=0.2)
    assert late.__enter__() is True
    wait_for(lambda: client.get(keyspace.task_lock(TASK)) is None, timeout=5, what="the short lock to expire")
    with run_alone(client, TASK, lifetime=30) as next_run:
        assert next_run is True
        late.__exit__(None, None, None)  # the late run ends while the next one holds the lock
        assert client.get(keyspace.task_lock(TASK)) is not None
        with run_alone(client, TASK, lifetime=30) as third:
            assert third is False


def test_a_spaced_run_keeps_its_lock_until_its_spacing_has_passed_since_it_started(client):
    now = [100.0]
    with run_alone(client, TASK, lifetime=30, spacing=20, clock=lambda: now[0]) as first:
        assert first is True
        now[0] += 5  # the run took 5 s of its 20
    left = client.pttl(keyspace.task_lock(TASK))
    assert 14_000 < left <= 15_000
    with run_alone(client, TASK, lifetime=30) as within_the_period:
        assert within_the_period is False


def test_a_spaced_run_longer_than_its_spacing_gives_the_lock_back_at_once(client):
    now = [100.0]
    with run_alone(client, TASK, lifetime=30, spacing=2, clock=lambda: now[0]):
        now[0] += 3
    assert client.get(keyspace.task_lock(TASK)) is None
