"""When the portal fails a batch or a line, rather than the engine or the request: which errors
pass (the line or batch is tried again later), what the owner is told, and a batch ended as
failed when not even its files could be written.

One batch's failure is its own: the runner ends it and goes on with the others.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import redis.exceptions
from django.db import InterfaceError, OperationalError

from fairness.gateway.errors import ApiError
from fairness.models import Batch, BatchStatus

# The database or the store away for a moment: what failed is tried again later. Any other error
# is the batch's (or the line's) own doing, and would come back every time.
PASSING_ERRORS = (OperationalError, InterfaceError, redis.exceptions.RedisError)


def batch_failure(exc: Exception) -> ApiError:
    """What the batch's owner is told (never the exception's own words: they are the portal's)."""
    if isinstance(exc, OSError):
        return ApiError(500, "The portal could not read this batch's input file.", "batch_failed")
    return ApiError(500, "The portal failed to run this batch (an internal error).", "batch_failed")


def error_list(reason: ApiError) -> dict[str, Any]:
    """A batch's `errors`, as OpenAI's Batch object has them."""
    return {"object": "list", "data": [{"code": reason.code, "message": reason.message, "param": None, "line": None}]}


def mark_failed(batch_pk: int, runner: str, errors: dict[str, Any]) -> bool:
    """The batch failed, when not even its files could be written: its lines are kept."""
    return bool(Batch.objects.filter(pk=batch_pk, runner=runner, status__in=Batch.UNFINISHED).update(
        status=BatchStatus.FAILED, failed_at=dt.datetime.now(tz=dt.UTC), errors=errors, runner="",
        runner_seen_at=None,
    ))
