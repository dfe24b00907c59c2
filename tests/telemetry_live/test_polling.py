"""Polling real engines: snapshots in Redis, samples in the DB, rates from counters."""

import datetime as dt

from django.utils import timezone

from fairness.models import EngineSample
from fairness.telemetry import polling
from tests.support.telemetry import load_on, poll, run, running_is


def test_a_poll_stores_the_latest_reading_and_a_sample_with_rates(engine):
    first = poll()
    assert [r.healthy for r in first.readings] == [True]
    assert first.readings[0].rates is None  # nothing to compare with yet
    load = load_on(engine.url, users=3)
    try:
        running_is(engine, 3)
        poll()
        second = poll()
    finally:
        load.stop()
    reading = second.readings[0]
    assert reading.snapshot.running == 3
    assert reading.rates.generation_tokens_per_s > 0
    latest = run(polling.latest_readings)
    assert latest[0]["name"] == "sim-cap" and latest[0]["running"] == 3
    assert EngineSample.objects.filter(replica__name="sim-cap").count() == 3


def test_an_unreachable_replica_reads_as_down(engine):
    engine.kill()
    reading = poll().readings[0]
    assert not reading.healthy and "unreachable" in reading.error
    assert EngineSample.objects.get().healthy is False


def test_compaction_averages_old_samples_and_drops_expired_ones(engine):
    poll()
    poll()
    now = timezone.now()
    EngineSample.objects.update(taken_at=now - dt.timedelta(hours=2))
    removed = polling.compact_samples(now, raw_for=dt.timedelta(hours=1), keep_for=dt.timedelta(days=1))
    assert removed == 2
    compacted = EngineSample.objects.get()
    assert compacted.resolution_seconds == 60
    polling.compact_samples(now + dt.timedelta(days=2), raw_for=dt.timedelta(hours=1), keep_for=dt.timedelta(days=1))
    assert not EngineSample.objects.exists()
