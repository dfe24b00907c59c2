"""Batches as the runner leaves them, made straight in the database: their lines finished lately
or long ago (the pace is measured over the last 5 minutes), and result files in storage."""

from __future__ import annotations

import datetime as dt
import secrets

from django.core.files.base import ContentFile
from django.utils import timezone

from fairness.batch.storage_writer import batch_storage, new_stored_name
from fairness.models import ApiKey, Batch, BatchFile, BatchLine, BatchLineState, BatchStatus

LATELY = dt.timedelta(minutes=2)  # well inside the 5-minute window the pace is measured over
LONG_AGO = dt.timedelta(minutes=15)  # well outside it


def carol_key(cast) -> ApiKey:
    return ApiKey.objects.get(pk=cast["carol"].key_id)


def stored_file(owner_id: int, content: bytes, purpose: str = "batch_output") -> BatchFile:
    name = batch_storage().save(new_stored_name(), ContentFile(content))
    return BatchFile.objects.create(public_id="file-" + secrets.token_hex(12), owner_id=owner_id, purpose=purpose,
                                    filename="results.jsonl", bytes=len(content), stored_name=name)


def make_batch(key: ApiKey, status: str = BatchStatus.IN_PROGRESS, *, done: int = 0, failed: int = 0,
               pending: int = 0, lately: int = 0,
               started_ago: dt.timedelta = dt.timedelta(minutes=20), **fields) -> Batch:
    """A batch with its lines: the first `lately` of the done ones finished within the pace window,
    every other finished line long before it."""
    now = timezone.now()
    batch = Batch.objects.create(
        public_id="batch_" + secrets.token_hex(12), owner_id=key.owner_id, api_key=key,
        input_file_public_id="file-input", endpoint="/v1/chat/completions", status=status,
        created_at=now - started_ago, in_progress_at=now - started_ago, expires_at=now + dt.timedelta(hours=24),
        **fields,
    )
    states = [BatchLineState.DONE] * done + [BatchLineState.FAILED] * failed + [BatchLineState.PENDING] * pending
    BatchLine.objects.bulk_create(
        BatchLine(batch=batch, index=n, custom_id=f"req-{n}", state=state,
                  finished_at=(now - (LATELY if n < lately else LONG_AGO))
                  if state in (BatchLineState.DONE, BatchLineState.FAILED) else None)
        for n, state in enumerate(states)
    )
    return batch
