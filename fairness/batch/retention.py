"""How long the batch lane keeps things, and what may go. A file is kept GP_FILE_RETENTION_DAYS
after its last use (uploaded, downloaded, a batch made from it), a batch and its lines that long
after it ended; nothing an unfinished batch still needs goes. An upload's reservation whose
gateway died mid-upload goes once it is older than any upload may last. The hourly task
fairness.prune_batch_storage runs prune(now); staff free one person's space at once with
free_person (through the audited actions).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import operator
from functools import reduce

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet, Sum

from fairness.models import Batch, BatchFile, BatchFileState


def longest_upload() -> dt.timedelta:
    """Longer than any upload may last: the body pace bounds it (http_server), so the largest file
    at the slowest pace allowed (57 hours by default), and an hour to spare."""
    seconds = (settings.GP_CLIENT_BODY_GRACE_SECONDS
               + settings.GP_MAX_BATCH_FILE_BYTES / settings.GP_CLIENT_MIN_BODY_BYTES_PER_SECOND)
    return dt.timedelta(seconds=seconds, hours=1)


@dataclasses.dataclass(frozen=True)
class Freed:
    batches: int
    files: int
    bytes: int
    reservations: int = 0


def retention_period() -> dt.timedelta:
    return dt.timedelta(days=settings.GP_FILE_RETENTION_DAYS)


def expires_at(row: BatchFile) -> dt.datetime:
    return row.last_used_at + retention_period()


ENDED_AT = ("completed_at", "cancelled_at", "expired_at", "failed_at")  # a batch ends with one of them


def _ended_batches(before: dt.datetime | None = None) -> QuerySet[Batch]:
    ended = Batch.objects.exclude(status__in=Batch.UNFINISHED)
    if before is None:
        return ended
    return ended.filter(reduce(operator.or_, (Q(**{f"{field}__lt": before}) for field in ENDED_AT)))


def _inputs_of_unfinished() -> QuerySet[Batch]:
    return Batch.objects.unfinished().filter(input_file__isnull=False)


def needed_by_unfinished(owner_id: int) -> set[int]:
    """The ids of one person's files that an unfinished batch of theirs still reads."""
    return set(_inputs_of_unfinished().filter(owner_id=owner_id).values_list("input_file_id", flat=True))


def _deletable_files() -> QuerySet[BatchFile]:
    """Stored files no unfinished batch reads (a running batch's input stays however old)."""
    return BatchFile.objects.filter(state=BatchFileState.STORED).exclude(
        pk__in=_inputs_of_unfinished().values("input_file_id")
    )


def _delete(batches: QuerySet[Batch], files: QuerySet[BatchFile], reservations: QuerySet[BatchFile]) -> Freed:
    with transaction.atomic():  # the files' content goes once this commits (models.py)
        size = files.aggregate(total=Sum("bytes"))["total"] or 0
        ended = batches.delete()[1].get("fairness.Batch", 0)  # their lines with them
        gone = files.delete()[1].get("fairness.BatchFile", 0)
        stale = reservations.delete()[1].get("fairness.BatchFile", 0)
    return Freed(ended, gone, size, stale)


def prune(now: dt.datetime) -> Freed:
    """Delete what has been kept its time by `now`."""
    cutoff = now - retention_period()
    return _delete(
        _ended_batches(before=cutoff),
        _deletable_files().filter(last_used_at__lt=cutoff),
        BatchFile.objects.filter(state=BatchFileState.UPLOADING, created_at__lt=now - longest_upload()),
    )


def free_person(owner_id: int) -> Freed:
    """Delete one person's ended batches and every stored file of theirs no unfinished batch
    needs, whatever their age. Uploads under way are left to finish."""
    return _delete(
        _ended_batches().filter(owner_id=owner_id),
        _deletable_files().filter(owner_id=owner_id),
        BatchFile.objects.none(),
    )
