"""A batch's ending: its output file (the lines answered 200) and error file (the rest that
ended), written in line order as OpenAI's batch output, then the batch's final status.

Output line: {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}
Error line:  the same with the error's status and body, or, for a line that never ran (invalid,
refused, expired), "response": null and "error": {"code", "message"}.
"""

from __future__ import annotations

import json
import secrets
import tempfile
from typing import Any

from django.core.files import File
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from fairness.batch.files_api import new_file_id
from fairness.batch.storage_writer import batch_storage, new_stored_name
from fairness.models import Batch, BatchFile, BatchLine, BatchLineState, BatchStatus

SPOOL_BYTES = 8 * 1024 * 1024  # smaller outputs are built in memory, larger on a temporary file
ENDED_AT = {
    BatchStatus.COMPLETED: "completed_at",
    BatchStatus.CANCELLED: "cancelled_at",
    BatchStatus.EXPIRED: "expired_at",
    BatchStatus.FAILED: "failed_at",
}


def expire_unfinished(batch: Batch) -> None:
    """The window ended: every line not yet ended goes to the error file as expired."""
    with transaction.atomic():
        expired = BatchLine.objects.filter(batch=batch, state=BatchLineState.PENDING).update(
            state=BatchLineState.FAILED, error_code="batch_expired", status_code=None, response="",
            error_message="This request could not be run before the batch's completion window ended.",
            finished_at=timezone.now(),
        )
        Batch.objects.filter(pk=batch.pk).update(failed=F("failed") + expired)


def finalize(batch: Batch, runner: str, status: BatchStatus, errors: dict[str, Any] | None = None) -> bool:
    """Write the files and end the batch with `status`, if `runner` still holds it (else nothing
    changes, and False). The files' rows, the status and the lines' deletion commit together: a
    runner dying between leaves no half-ended batch, only stored content no row names."""
    if status == BatchStatus.COMPLETED:
        Batch.objects.filter(pk=batch.pk, runner=runner, finalizing_at__isnull=True).update(
            status=BatchStatus.FINALIZING, finalizing_at=timezone.now()
        )
    stored = {"output": _store(batch, BatchLineState.DONE), "error": _store(batch, BatchLineState.FAILED)}
    with transaction.atomic():
        rows = {kind: _file_row(batch, kind, *found) if found else None for kind, found in stored.items()}
        fields: dict[str, Any] = {"status": status, ENDED_AT[status]: timezone.now(), "output_file": rows["output"],
                                  "error_file": rows["error"], "runner": "", "runner_seen_at": None}
        if errors is not None:
            fields["errors"] = errors
        ended = Batch.objects.filter(pk=batch.pk, runner=runner, status__in=Batch.UNFINISHED).update(**fields)
        if ended:  # the files hold every line's result now: the rows would only take up room
            BatchLine.objects.filter(batch=batch).delete()
        else:
            transaction.set_rollback(True)
    if not ended:
        for found in stored.values():
            if found:
                batch_storage().delete(found[0])
    return bool(ended)


def _store(batch: Batch, state: BatchLineState) -> tuple[str, int] | None:
    """The lines in `state` written to storage: (stored name, bytes), or None when there are none."""
    lines = BatchLine.objects.filter(batch=batch, state=state).order_by("index")
    if not lines.exists():
        return None
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        for line in lines.iterator(chunk_size=500):
            spool.write(json.dumps(_result(line)).encode() + b"\n")
        size = spool.tell()
        spool.seek(0)
        return batch_storage().save(new_stored_name(), File(spool, name="result.jsonl")), size


def _file_row(batch: Batch, kind: str, stored_name: str, size: int) -> BatchFile:
    # OpenAI names both files' purpose "batch_output". They are the batch key's doing, so that
    # key reads them even when its owner did not make it (BatchFileQuerySet.reachable_by).
    return BatchFile.objects.create(
        public_id=new_file_id(), owner_id=batch.owner_id, uploaded_with_id=batch.api_key_id, purpose="batch_output",
        filename=f"{batch.public_id}_{kind}.jsonl", bytes=size, stored_name=stored_name,
    )


def _result(line: BatchLine) -> dict[str, Any]:
    response = None
    if line.status_code is not None:
        try:
            body = json.loads(line.response)
        except (ValueError, RecursionError):
            body = line.response
        response = {"status_code": line.status_code, "request_id": line.request_id, "body": body}
    error = None if response is not None else {"code": line.error_code, "message": line.error_message}
    return {"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": line.custom_id, "response": response,
            "error": error}
