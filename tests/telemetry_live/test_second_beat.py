"""A second Celery beat is harmless: the poll runs once per period however many beats send it, so
each replica gets one sample a period and an alert is mailed once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from fairness.gateway.accounting import USAGE_PUSHED
from fairness.models import EngineSample, SaturationAlert
from fairness.store import keyspace
from fairness.telemetry import tasks
from tests.support.polling import wait_for
from tests.support.processes import LOG_DIR, free_port, gateway_env
from tests.support.worker_process import BeatProcess, WorkerProcess

PERIOD = 1.0  # GP_POLL_SECONDS of the live processes: short, so a few periods pass quickly


def samples() -> list[float]:
    """When each sample of the replica was taken (epoch seconds), in order."""
    rows = EngineSample.objects.filter(replica__name="sim-cap", resolution_seconds=0).order_by("taken_at")
    return [row.taken_at.timestamp() for row in rows]


def at_once(task: Callable[[], int], runs: int = 2) -> list[int]:
    """`runs` calls of the task started together on threads, as workers fed by two beats would."""
    start = threading.Barrier(runs)
    results: list[int] = []

    def one() -> None:
        start.wait(timeout=10)
        results.append(task())

    threads = [threading.Thread(target=one) for _ in range(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(results) == runs
    return sorted(results)


def test_two_polls_at_once_write_one_sample_per_replica_and_mail_one_alert(engine, redis_client, settings,
                                                                          mailoutbox):
    settings.ADMINS = [("Ops", "ops@lab.example")]
    settings.GP_ALERT_WEBHOOK_URL = ""
    redis_client.hset(keyspace.GATEWAY_COUNTERS, USAGE_PUSHED, 5)  # five usage events pushed out unflushed

    assert at_once(tasks.poll_engines) == [0, 1]  # one run polled the one replica, the other stood aside

    assert len(samples()) == 1
    assert SaturationAlert.objects.filter(kind="usage").count() == 1
    assert [mail.to for mail in mailoutbox] == [["ops@lab.example"]]
    assert "usage events dropped" in mailoutbox[0].subject


def test_the_next_period_polls_again(engine, settings):
    settings.GP_POLL_SECONDS = PERIOD
    first = time.monotonic()
    assert tasks.poll_engines() == 1
    assert tasks.poll_engines() == 0  # a second beat's send within the period
    wait_for(lambda: tasks.poll_engines() == 1, timeout=10, what="a poll in the next period")
    assert time.monotonic() - first >= tasks.POLL_SPACING_SHARE * PERIOD
    assert len(samples()) == 2


def test_a_poll_that_failed_frees_the_task_at_its_period_not_after_the_lock_lifetime(engine, settings,
                                                                                      monkeypatch):
    settings.GP_POLL_SECONDS = 0.4

    def broken(refit_every: float = 15.0) -> int:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(tasks, "poll_and_publish", broken)
    failed_at = time.monotonic()
    with pytest.raises(RuntimeError):
        tasks.poll_engines()
    monkeypatch.undo()
    wait_for(lambda: tasks.poll_engines() == 1, timeout=5, what="a poll after the failed one")
    assert time.monotonic() - failed_at < tasks.POLL_LOCK_SECONDS / 2
    assert len(samples()) == 1


@pytest.fixture
def processes(live_db_url: str, transactional_db, redis_url: str) -> Iterator[list[WorkerProcess]]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    env = gateway_env(live_db_url, GP_POLL_SECONDS=str(PERIOD))
    started: list[WorkerProcess] = []
    try:
        started.append(WorkerProcess(env, LOG_DIR / f"worker-alone-{free_port()}.log", beat=False))
        started += [BeatProcess(env, LOG_DIR / f"beat-{n}-{free_port()}.log") for n in (1, 2)]
        yield started
    finally:
        for process in started:
            process.stop()


def test_two_beats_and_a_worker_poll_each_replica_once_a_period(engine, processes):
    worker, *beats = processes
    evidence = lambda: "\n".join(p.log_tail(15) for p in processes)  # noqa: E731
    wait_for(lambda: len(samples()) >= 2, timeout=40, what="the worker's first polls", evidence=evidence)
    sent_before = [beat.sent("poll-engines") for beat in beats]
    first = samples()[-1]
    wait_for(lambda: samples()[-1] - first >= 6 * PERIOD, timeout=30, what="six periods of polls",
             evidence=evidence)
    window = [at for at in samples() if at >= first]
    sent = [beat.sent("poll-engines") - before for beat, before in zip(beats, sent_before, strict=True)]

    assert all(n >= 5 for n in sent), f"each beat sent the poll every period: {sent}"
    span = window[-1] - window[0]
    # One sample a period: without the lock each of the two beats' sends would poll.
    assert len(window) - 1 <= span / PERIOD + 1, (len(window), span)
    gaps = [b - a for a, b in zip(window, window[1:], strict=False)]
    assert min(gaps) >= tasks.POLL_SPACING_SHARE * PERIOD - 0.1, gaps  # (the poll reads its clock after the lock)
