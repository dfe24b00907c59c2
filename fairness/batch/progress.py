"""How far a batch has got, for the pages: done, failed, of how many, and how long the rest should
take at the pace its lines finished lately. Also how much batch work waits, for the capacity page.

`progress_of` is pure (the figures and the clock come in); the queries beside it fetch the figures
for many batches in one round trip."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Q

from fairness.models import Batch, BatchLine, BatchLineState, BatchStatus

# Long enough to hold several lines of a slow batch, short enough that the estimate follows a
# change of pace (the card filling up with interactive work, or emptying).
RATE_WINDOW = dt.timedelta(minutes=5)
FINISHED_STATES = (BatchLineState.DONE, BatchLineState.FAILED)
QUEUED_STATES = (BatchLineState.PENDING,)  # to run, or running


@dataclass(frozen=True)
class LineCounts:
    """One batch's lines by state, and how many of them finished within RATE_WINDOW."""

    total: int = 0
    done: int = 0
    failed: int = 0
    finished_lately: int = 0


@dataclass(frozen=True)
class Progress:
    done: int
    failed: int
    total: int
    seconds_left: float | None  # None: no pace to go by yet, or nothing more will run

    @property
    def finished_lines(self) -> int:
        return self.done + self.failed

    @property
    def fraction(self) -> float:
        return min(1.0, self.finished_lines / self.total) if self.total else 0.0

    @property
    def summary(self) -> str:
        """Like "120 done, 3 failed of 500"."""
        return f"{self.done:,} done, {self.failed:,} failed of {self.total:,}"


def progress_of(batch: Batch, lines: LineCounts | None, now: dt.datetime) -> Progress:
    """`lines` None (or no lines yet): the batch's own counters, which are final once it ended."""
    if lines is not None and lines.total:
        done, failed, total = lines.done, lines.failed, lines.total
    else:
        done, failed, total = batch.completed, batch.failed, batch.total
    return Progress(done, failed, total, _seconds_left(batch, lines, total - done - failed, now))


def _seconds_left(batch: Batch, lines: LineCounts | None, remaining: int, now: dt.datetime) -> float | None:
    # A cancelled batch starts nothing more: the lines left will never run, so no estimate.
    if batch.finished or batch.status == BatchStatus.CANCELLING or lines is None:
        return None
    if remaining <= 0:
        return 0.0
    if not lines.finished_lately:
        return None
    # A batch younger than the window has run only since it started: its pace is over that span.
    started = batch.in_progress_at or batch.created_at
    span = (now - max(now - RATE_WINDOW, started)).total_seconds()
    if span <= 0:
        return None
    return remaining / (lines.finished_lately / span)


def line_counts(batch_ids: Iterable[int], now: dt.datetime) -> dict[int, LineCounts]:
    """The lines of these batches by state, one query for them all (batches with no lines left out)."""
    ids = list(batch_ids)
    if not ids:
        return {}
    rows = (
        BatchLine.objects.filter(batch_id__in=ids)
        .order_by()
        .values("batch_id")
        .annotate(
            total=Count("pk"),
            done=Count("pk", filter=Q(state=BatchLineState.DONE)),
            failed=Count("pk", filter=Q(state=BatchLineState.FAILED)),
            finished_lately=Count("pk", filter=Q(state__in=FINISHED_STATES, finished_at__gte=now - RATE_WINDOW)),
        )
    )
    return {
        row["batch_id"]: LineCounts(row["total"], row["done"], row["failed"], row["finished_lately"]) for row in rows
    }


def progress_by_batch(batches: Iterable[Batch], now: dt.datetime) -> dict[int, Progress]:
    """Each batch's progress; only unfinished batches' lines are counted, an ended one's counters
    being final already."""
    batches = list(batches)
    counts = line_counts((b.pk for b in batches if not b.finished), now)
    return {b.pk: progress_of(b, counts.get(b.pk), now) for b in batches}


@dataclass(frozen=True)
class QueuedWork:
    requests: int
    batches: int

    @property
    def sentence(self) -> str:
        if not self.requests:
            return "No Batch API work queued."
        requests = "request" if self.requests == 1 else "requests"
        batches = "batch" if self.batches == 1 else "batches"
        return f"Batch API work queued: {self.requests:,} {requests} in {self.batches:,} {batches}."


def queued_work() -> QueuedWork:
    """Lines still to run, or running, in batches that still run. A cancelling batch's are left
    out: its runner starts none of them and stops the running ones."""
    running = Batch.objects.unfinished().exclude(status=BatchStatus.CANCELLING)
    figures = BatchLine.objects.filter(batch__in=running, state__in=QUEUED_STATES).aggregate(
        requests=Count("pk"), batches=Count("batch", distinct=True)
    )
    return QueuedWork(figures["requests"], figures["batches"])
