"""What the batch lane keeps, and for how long: a file GP_FILE_RETENTION_DAYS after its last use,
a batch that long after it ended, nothing an unfinished batch needs; an ended batch keeps no line
rows (its files hold the results)."""

from __future__ import annotations

import datetime as dt
import secrets

import pytest
from django.conf import settings
from django.utils import timezone

from fairness.batch import result_files, retention
from fairness.batch.tasks import prune_batch_storage
from fairness.models import ApiKey, Batch, BatchFile, BatchFileState, BatchLine, BatchLineState, BatchStatus
from tests.support.batch_files import files_on_disk
from tests.support.batch_rows import make_batch, stored_file

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


@pytest.fixture
def carol(cast) -> ApiKey:
    return ApiKey.objects.get(pk=cast["carol"].key_id)


def file_used(key: ApiKey, ago: dt.timedelta, purpose: str = "batch") -> BatchFile:
    row = stored_file(key.owner_id, b'{"custom_id": "a"}\n', purpose)
    BatchFile.objects.filter(pk=row.pk).touch(NOW - ago)
    return row


def batch_ended(key: ApiKey, ago: dt.timedelta, status: str = BatchStatus.COMPLETED, **fields) -> Batch:
    ended_field = result_files.ENDED_AT[BatchStatus(status)]
    return make_batch(key, status, done=2, **{ended_field: NOW - ago}, **fields)


def test_the_default_keeps_files_thirty_days_and_beat_prunes_hourly():
    assert settings.GP_FILE_RETENTION_DAYS == 30
    assert settings.CELERY_BEAT_SCHEDULE["prune-batch-storage"] == {
        "task": "fairness.prune_batch_storage", "schedule": 3600.0,
    }


def test_pruning_deletes_what_has_kept_its_time_and_nothing_else(carol, stored_files):
    old, recent = file_used(carol, 31 * DAY), file_used(carol, 29 * DAY)
    old_result = file_used(carol, 31 * DAY, purpose="batch_output")
    still_read = file_used(carol, 90 * DAY)  # the input of a batch still running
    running = make_batch(carol, BatchStatus.IN_PROGRESS, pending=3, input_file=still_read)
    long_ended, lately_ended = batch_ended(carol, 31 * DAY), batch_ended(carol, 29 * DAY, BatchStatus.CANCELLED)
    stale = BatchFile.objects.create(
        public_id="file-stale", owner_id=carol.owner_id, purpose="batch", filename="", bytes=100,
        stored_name="reserved/" + secrets.token_hex(8), state=BatchFileState.UPLOADING, created_at=NOW - 3 * DAY,
    )
    # Two days into an upload of 200 MiB at the slowest pace allowed (57 hours): still under way.
    fresh = BatchFile.objects.create(
        public_id="file-fresh", owner_id=carol.owner_id, purpose="batch", filename="", bytes=100,
        stored_name="reserved/" + secrets.token_hex(8), state=BatchFileState.UPLOADING, created_at=NOW - 2 * DAY,
    )
    assert len(files_on_disk(stored_files)) == 4

    freed = retention.prune(NOW)

    assert freed == retention.Freed(batches=1, files=2, bytes=old.bytes + old_result.bytes, reservations=1)
    assert set(BatchFile.objects.values_list("pk", flat=True)) == {recent.pk, still_read.pk, fresh.pk}
    assert set(Batch.objects.values_list("pk", flat=True)) == {running.pk, lately_ended.pk}
    assert not BatchLine.objects.filter(batch_id=long_ended.pk).exists()
    assert not BatchFile.objects.filter(pk=stale.pk).exists()
    assert len(files_on_disk(stored_files)) == 2  # the content went with the rows


def test_a_file_read_again_starts_its_time_again(carol):
    row = file_used(carol, 31 * DAY)
    BatchFile.objects.filter(pk=row.pk).touch(NOW - DAY)
    assert retention.prune(NOW).files == 0
    row.refresh_from_db()
    assert retention.expires_at(row) == NOW + 29 * DAY


def test_the_task_prunes_as_of_now(carol):
    kept, gone = stored_file(carol.owner_id, b"{}\n"), stored_file(carol.owner_id, b'{"custom_id": "a"}\n')
    BatchFile.objects.filter(pk=gone.pk).touch(timezone.now() - 31 * DAY)
    assert prune_batch_storage() == {"batches": 0, "files": 1, "bytes": gone.bytes, "reservations": 0}
    assert list(BatchFile.objects.values_list("pk", flat=True)) == [kept.pk]


def test_an_ended_batch_keeps_its_results_in_files_not_in_line_rows(carol, stored_files):
    runner = "runner-" + secrets.token_hex(4)
    batch = make_batch(carol, BatchStatus.CANCELLING, done=3, pending=2, runner=runner)
    BatchLine.objects.filter(batch=batch, state=BatchLineState.DONE).update(status_code=200, response='{"ok": 1}')

    assert result_files.finalize(batch, runner, BatchStatus.CANCELLED)

    batch.refresh_from_db()
    assert batch.status == BatchStatus.CANCELLED and not BatchLine.objects.filter(batch=batch).exists()
    assert batch.output_file is not None and batch.output_file.uploaded_with_id == carol.pk  # its key reads it
    assert batch.output_file.bytes > 0 and len(files_on_disk(stored_files)) == 1
