"""The `validating` step: a batch's input file read line by line into BatchLine rows, the bad
lines failed at once with their reasons, then the batch is `in_progress` (or `failed` when the
file cannot be run at all: gone, or more lines than a batch may hold)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fairness.batch.line_check import BadLine, GoodLine, check_line
from fairness.batch.storage_writer import batch_storage
from fairness.gateway.api_keys import KeyInfo
from fairness.gateway.streamed_body import mebibytes
from fairness.models import Batch, BatchLine, BatchLineState, BatchStatus
from fairness.scheduling.directory import ReplicaDirectory

log = logging.getLogger(__name__)

CHUNK_ROWS = 500


def model_refusal(key: KeyInfo, directory: ReplicaDirectory, model: str) -> tuple[str, str] | None:
    """The code and the words the gateway would refuse this key's request for `model` with, or None."""
    if not directory.serving(model):
        return "model_not_found", f"The model '{model}' does not exist."
    if not directory.serving(model, key.tier.name):
        return "model_not_available_for_tier", f"The model '{model}' is not served to the {key.tier.name} tier."
    refused_by = key.model_access.refused_by(model)
    if refused_by is not None:
        return "model_not_allowed", f"This key may not use the model '{model}': {refused_by} restricts its models."
    return None


def take_in(
    batch: Batch, key: KeyInfo, directory: ReplicaDirectory, still_held: Callable[[], bool] = lambda: True
) -> None:
    """Read the input into lines and start the batch. Starts over if an earlier runner died
    half-way (its rows go); does nothing if the batch is no longer validating. `still_held` is
    asked after each chunk of rows: False (another runner took the batch over) stops at once."""
    BatchLine.objects.filter(batch=batch).delete()
    if batch.input_file is None:
        _fail(batch, "input_file_missing", f"The input file {batch.input_file_public_id} was deleted.")
        return
    seen: set[str] = set()
    rows: list[BatchLine] = []
    total = failed = 0
    now = timezone.now()
    for index, raw in enumerate(_lines(batch.input_file.stored_name)):
        if index >= settings.GP_MAX_BATCH_LINES:
            BatchLine.objects.filter(batch=batch).delete()
            _fail(batch, "too_many_lines", f"The file has more than {settings.GP_MAX_BATCH_LINES:,} lines, the "
                  "most one batch may hold (GP_MAX_BATCH_LINES); split it.")
            return
        checked = _checked(batch, index, raw, seen, lambda m: model_refusal(key, directory, m))
        total += 1
        if isinstance(checked, BadLine):
            failed += 1
            rows.append(BatchLine(batch=batch, index=index, custom_id=checked.custom_id, state=BatchLineState.FAILED,
                                  error_code=checked.code, error_message=checked.message, finished_at=now))
        else:
            rows.append(BatchLine(batch=batch, index=index, custom_id=checked.custom_id, body=checked.body))
        if len(rows) >= CHUNK_ROWS:
            BatchLine.objects.bulk_create(rows)
            rows = []
            if not still_held():
                return
    BatchLine.objects.bulk_create(rows)
    if total == 0:
        _fail(batch, "empty_file", "The input file holds no request.")
        return
    with transaction.atomic():
        Batch.objects.filter(pk=batch.pk, status=BatchStatus.VALIDATING).update(
            status=BatchStatus.IN_PROGRESS, in_progress_at=timezone.now(), total=total, failed=failed, completed=0
        )


def _checked(
    batch: Batch, index: int, raw: bytes | None, seen: set[str], refusal: Callable[[str], tuple[str, str] | None]
) -> GoodLine | BadLine:
    """The line checked; whatever goes wrong with one line is that line's error, never the batch's."""
    if raw is None:
        return BadLine("", "line_too_large", f"This line is longer than {mebibytes(settings.GP_BATCH_MAX_LINE_BYTES)} "
                       "(GP_BATCH_MAX_LINE_BYTES), more than any request the gateway takes.")
    try:
        return check_line(raw, batch.endpoint, seen, refusal, settings.GP_MAX_BODY_BYTES)
    except Exception:
        log.exception("batch %s: line %d could not be checked", batch.public_id, index + 1)
        return BadLine("", "invalid_line", "The portal could not read this line.")


def _lines(stored_name: str) -> Iterator[bytes | None]:
    """The file's non-blank lines as stored (their text is the JSON parser's to check). A line
    longer than GP_BATCH_MAX_LINE_BYTES is never held whole: it is read past and given as None."""
    limit = settings.GP_BATCH_MAX_LINE_BYTES + 1  # and its newline
    with batch_storage().open(stored_name, "rb") as file:
        while raw := file.readline(limit):
            if len(raw) >= limit and not raw.endswith(b"\n"):
                while (rest := file.readline(limit)) and not rest.endswith(b"\n"):
                    pass
                yield None
                continue
            if raw := raw.strip():
                yield raw


def _fail(batch: Batch, code: str, message: str) -> None:
    errors = {"object": "list", "data": [{"code": code, "message": message, "param": None, "line": None}]}
    Batch.objects.filter(pk=batch.pk, status=BatchStatus.VALIDATING).update(
        status=BatchStatus.FAILED, failed_at=timezone.now(), errors=errors
    )
