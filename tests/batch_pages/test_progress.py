"""A batch's progress in figures, and the estimate of the time left from the pace lines finished lately."""

from __future__ import annotations

import datetime as dt

import pytest

from fairness.batch.progress import (
    RATE_WINDOW,
    LineCounts,
    line_counts,
    progress_by_batch,
    progress_of,
    queued_work,
)
from fairness.models import Batch, BatchLine, BatchStatus
from tests.support.batch_rows import carol_key, make_batch

NOW = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)


def batch(status: str = BatchStatus.IN_PROGRESS, started_ago: dt.timedelta = dt.timedelta(hours=1),
          **counters: int) -> Batch:
    """Unsaved: progress_of reads the row's fields and nothing else."""
    return Batch(status=status, created_at=NOW - started_ago, in_progress_at=NOW - started_ago,
                 expires_at=NOW + dt.timedelta(hours=23), **counters)


def test_it_counts_done_and_failed_of_the_total():
    progress = progress_of(batch(), LineCounts(total=500, done=120, failed=3), NOW)
    assert progress.summary == "120 done, 3 failed of 500"
    assert progress.finished_lines == 123
    assert progress.fraction == pytest.approx(123 / 500)


def test_it_estimates_the_time_left_from_the_lines_finished_in_the_last_five_minutes():
    # 60 lines in the last 300 s is one every 5 s; 48 still to run take 240 s.
    lines = LineCounts(total=200, done=150, failed=2, finished_lately=60)
    assert progress_of(batch(), lines, NOW).seconds_left == pytest.approx(240)
    # Twice the pace, half the time.
    faster = LineCounts(total=200, done=150, failed=2, finished_lately=120)
    assert progress_of(batch(), faster, NOW).seconds_left == pytest.approx(120)


def test_a_batch_younger_than_the_window_is_timed_over_its_own_life():
    # 30 lines in the 60 s it has run is one every 2 s, not one every 10 s over 5 minutes.
    young = batch(started_ago=dt.timedelta(seconds=60))
    lines = LineCounts(total=40, done=30, finished_lately=30)
    assert progress_of(young, lines, NOW).seconds_left == pytest.approx(20)


def test_there_is_no_estimate_before_any_line_finished_lately():
    lines = LineCounts(total=500, done=100, finished_lately=0)
    assert progress_of(batch(), lines, NOW).seconds_left is None
    assert progress_of(batch(BatchStatus.VALIDATING), None, NOW).seconds_left is None


@pytest.mark.parametrize("status", [BatchStatus.COMPLETED, BatchStatus.CANCELLED, BatchStatus.EXPIRED,
                                    BatchStatus.FAILED, BatchStatus.CANCELLING])
def test_there_is_no_estimate_once_nothing_more_will_run(status):
    lines = LineCounts(total=500, done=100, finished_lately=50)
    assert progress_of(batch(status), lines, NOW).seconds_left is None


def test_a_batch_writing_its_results_has_nothing_left_to_run():
    lines = LineCounts(total=10, done=9, failed=1, finished_lately=4)
    assert progress_of(batch(BatchStatus.FINALIZING), lines, NOW).seconds_left == 0


def test_without_lines_the_batch_counters_are_the_figures():
    ended = batch(BatchStatus.COMPLETED, total=80, completed=78, failed=2)
    progress = progress_of(ended, None, NOW)
    assert (progress.done, progress.failed, progress.total, progress.fraction) == (78, 2, 80, 1.0)
    assert progress_of(batch(BatchStatus.VALIDATING), None, NOW).fraction == 0.0


@pytest.mark.django_db
def test_line_counts_take_the_pace_from_finished_at(cast):
    key = carol_key(cast)
    running = make_batch(key, done=5, failed=2, pending=4, lately=4)
    other = make_batch(key, done=1, lately=1)

    now = running.created_at + dt.timedelta(minutes=20)
    counts = line_counts([running.pk], now)

    assert counts == {running.pk: LineCounts(total=11, done=5, failed=2, finished_lately=4)}
    assert other.pk not in counts
    # A line finished exactly at the window's start still counts; a moment before it does not.
    line = BatchLine.objects.filter(batch=running, state="failed").first()
    line.finished_at = now - RATE_WINDOW
    line.save(update_fields=["finished_at"])
    assert line_counts([running.pk], now)[running.pk].finished_lately == 5
    line.finished_at = now - RATE_WINDOW - dt.timedelta(seconds=1)
    line.save(update_fields=["finished_at"])
    assert line_counts([running.pk], now)[running.pk].finished_lately == 4


@pytest.mark.django_db
def test_an_ended_batch_shows_its_final_counters_not_its_lines(cast):
    key = carol_key(cast)
    ended = make_batch(key, BatchStatus.COMPLETED, done=3)  # the rest of its lines gone
    Batch.objects.filter(pk=ended.pk).update(total=10, completed=9, failed=1)
    running = make_batch(key, done=3, pending=2, lately=3)

    progress = progress_by_batch(Batch.objects.filter(pk__in=[ended.pk, running.pk]), running.created_at
                                 + dt.timedelta(minutes=20))

    assert progress[ended.pk].summary == "9 done, 1 failed of 10"
    assert progress[running.pk].summary == "3 done, 0 failed of 5"
    assert progress[running.pk].seconds_left == pytest.approx(2 / (3 / 300))


@pytest.mark.django_db
def test_queued_work_counts_lines_still_to_run_in_batches_that_still_run(cast):
    key = carol_key(cast)
    assert queued_work().sentence == "No Batch API work queued."
    make_batch(key, pending=4, done=2)
    make_batch(key, BatchStatus.VALIDATING, pending=2)
    make_batch(key, BatchStatus.CANCELLING, pending=6)  # its runner starts none of these
    make_batch(key, BatchStatus.COMPLETED, done=4)
    make_batch(key, BatchStatus.EXPIRED, pending=7)  # left behind when its window ended

    work = queued_work()

    assert (work.requests, work.batches) == (6, 2)
    assert work.sentence == "Batch API work queued: 6 requests in 2 batches."


def test_queued_work_in_words_counts_one_as_one():
    from fairness.batch.progress import QueuedWork

    assert QueuedWork(1, 1).sentence == "Batch API work queued: 1 request in 1 batch."
    assert QueuedWork(12_400, 3).sentence == "Batch API work queued: 12,400 requests in 3 batches."
