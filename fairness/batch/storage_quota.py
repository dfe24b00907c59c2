"""What one person may keep in the batch lane: GP_MAX_BATCH_FILES_PER_USER uploaded files, and
GP_STORAGE_QUOTA_BYTES_PER_USER bytes of files, uploads and batch results together.

An upload reserves its room before any of its body is read: a row in state "uploading", sized to
the most its file may hold, made while the owner's user row is locked (select_for_update on
PostgreSQL; SQLite's IMMEDIATE transactions take one writer at a time anyway). So uploads sent
at the same moment, through any number of gateway processes, each count the others'
reservations. A stored upload keeps only its real size; a failed one gives its room back at
once, and one whose gateway died is given back by the pruning task (retention.py).

A batch's results are written whatever room is left (the engines' work is done and charged by
then), but while a person's files fill their quota no batch of theirs starts and nothing uploads.
A running batch's lines are a copy of its input: they count once, as the input file, or as the
batch's input_bytes once that file is deleted, until the batch ends (its lines go then).
"""

from __future__ import annotations

import dataclasses
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from fairness.gateway.errors import ApiError
from fairness.gateway.streamed_body import mebibytes
from fairness.models import Batch, BatchFile, BatchFileState

# A form's own bytes beside its file (boundaries, part headers, the purpose field): a declared
# length this far past the room left may still hold a file that fits.
FORM_OVERHEAD_BYTES = 16 * 1024


@dataclasses.dataclass(frozen=True)
class Reservation:
    row_id: int
    max_bytes: int  # the most the file may hold: the room reserved for it
    quota_bound: bool  # whether the quota, not the file size limit, set max_bytes


def used_bytes(owner_id: int) -> int:
    """The bytes one person's files hold, reservations of uploads under way included, and the
    lines of their unfinished batches whose input file they deleted (the lines hold it still)."""
    files = BatchFile.objects.filter(owner_id=owner_id).aggregate(total=Sum("bytes"))["total"] or 0
    orphaned = Batch.objects.of_owner(owner_id).unfinished().filter(input_file__isnull=True)
    return files + (orphaned.aggregate(total=Sum("input_bytes"))["total"] or 0)


def quota_refusal(used: int) -> ApiError:
    quota = settings.GP_STORAGE_QUOTA_BYTES_PER_USER
    return ApiError(
        403, f"Your files hold {mebibytes(used)} of the {mebibytes(quota)} one person may keep "
        "(GP_STORAGE_QUOTA_BYTES_PER_USER, batch results included); delete some (DELETE /v1/files/{file_id}) "
        "first.", "storage_quota_exceeded",
    )


def refuse_if_full(owner_id: int) -> None:
    """403 when the person's files already fill their quota (a batch would only add results)."""
    used = used_bytes(owner_id)
    if used >= settings.GP_STORAGE_QUOTA_BYTES_PER_USER:
        raise quota_refusal(used)


def reserve_upload(owner_id: int, key_id: int, declared_bytes: int | None, public_id: str) -> Reservation:
    """Room for one upload (the file-to-be named `public_id`), or 403 before its body is read
    (file_limit_reached, storage_quota_exceeded)."""
    with transaction.atomic():
        # The owner's row is the lock every upload of theirs queues on (a no-op on SQLite, whose
        # IMMEDIATE transactions already let one writer in at a time).
        get_user_model().objects.select_for_update().filter(pk=owner_id).first()
        held = BatchFile.objects.filter(owner_id=owner_id, purpose="batch").count()
        if held >= settings.GP_MAX_BATCH_FILES_PER_USER:
            raise ApiError(
                403, f"You keep {held} files already, the most one person may (GP_MAX_BATCH_FILES_PER_USER); "
                "delete some (DELETE /v1/files/{file_id}) first.", "file_limit_reached",
            )
        used = used_bytes(owner_id)
        room = settings.GP_STORAGE_QUOTA_BYTES_PER_USER - used
        if room <= 0 or (declared_bytes is not None and declared_bytes - FORM_OVERHEAD_BYTES > room):
            raise quota_refusal(used)
        max_bytes = min(settings.GP_MAX_BATCH_FILE_BYTES, room)
        quota_bound = max_bytes < settings.GP_MAX_BATCH_FILE_BYTES
        if declared_bytes is not None:  # the file is shorter than the form holding it
            max_bytes = min(max_bytes, declared_bytes)
        row = BatchFile.objects.create(
            public_id=public_id, owner_id=owner_id, uploaded_with_id=key_id, purpose="batch",
            filename="", bytes=max_bytes, stored_name=f"reserved/{secrets.token_hex(16)}",
            state=BatchFileState.UPLOADING,
        )
    return Reservation(row.pk, max_bytes, quota_bound)


def complete_upload(reservation: Reservation, filename: str, purpose: str, stored_name: str, size: int) -> BatchFile:
    """The reservation becomes the stored file, at its real size. LookupError when it is gone
    meanwhile (staff freed the person's storage): the caller deletes the content."""
    now = timezone.now()
    done = BatchFile.objects.filter(pk=reservation.row_id, state=BatchFileState.UPLOADING).update(
        state=BatchFileState.STORED, filename=filename, purpose=purpose, stored_name=stored_name, bytes=size,
        created_at=now, last_used_at=now,
    )
    if not done:
        raise LookupError(reservation.row_id)
    return BatchFile.objects.get(pk=reservation.row_id)


def release(reservation: Reservation) -> None:
    """An upload that failed gives its room back (its partial content was deleted already)."""
    BatchFile.objects.filter(pk=reservation.row_id, state=BatchFileState.UPLOADING).delete()
