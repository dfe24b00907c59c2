"""The Batch object, as OpenAI's reference has it, from a Batch row."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fairness.models import Batch


def _seconds(moment: dt.datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def batch_object(batch: Batch) -> dict[str, Any]:
    """The Batch object as OpenAI's OpenAPI document has it: an optional field with no value is
    left out (the document types them as integers and strings, not null)."""
    found = {
        "id": batch.public_id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": batch.errors,
        "input_file_id": batch.input_file_public_id,
        "completion_window": batch.completion_window,
        "status": batch.status,
        "output_file_id": batch.output_file.public_id if batch.output_file is not None else None,
        "error_file_id": batch.error_file.public_id if batch.error_file is not None else None,
        "created_at": _seconds(batch.created_at),
        "in_progress_at": _seconds(batch.in_progress_at),
        "expires_at": _seconds(batch.expires_at),
        "finalizing_at": _seconds(batch.finalizing_at),
        "completed_at": _seconds(batch.completed_at),
        "failed_at": _seconds(batch.failed_at),
        "expired_at": _seconds(batch.expired_at),
        "cancelling_at": _seconds(batch.cancelling_at),
        "cancelled_at": _seconds(batch.cancelled_at),
        "request_counts": {"total": batch.total, "completed": batch.completed, "failed": batch.failed},
        "metadata": batch.metadata,
    }
    return {name: value for name, value in found.items() if value is not None}
