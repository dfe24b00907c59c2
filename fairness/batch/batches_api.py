"""/v1/batches: OpenAI's Batch API. Creating a batch checks what can be checked at once (the input
file is the caller's and meant for batches, the endpoint, the window, the metadata) and leaves
the lines to the batch runner (fairness/batch/runner.py), which reads them while the batch is
`validating`. A batch belongs to the key's owner, like a file: a key they made themselves sees
all of theirs, a key issued for them only the batches it created; anyone else gets 404.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import secrets
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpResponse
from django.utils import timezone

from fairness.batch import control, storage_quota
from fairness.batch.batch_objects import batch_object
from fairness.batch.files_api import ID_ALPHABET
from fairness.gateway.errors import ApiError
from fairness.gateway.runtime import GatewayRuntime
from fairness.gateway.streamed_body import StreamedRequest
from fairness.models import Batch, BatchFile, BatchQuerySet, BatchStatus

log = logging.getLogger(__name__)

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")  # line_runner.ENDPOINT_VIEWS
COMPLETION_WINDOWS = {"24h": dt.timedelta(hours=24)}
MAX_LIST_LIMIT = 100  # OpenAI's range for `limit` is 1 to 100, and 20 its default
DEFAULT_LIST_LIMIT = 20
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512


def new_batch_id() -> str:
    return "batch_" + "".join(secrets.choice(ID_ALPHABET) for _ in range(24))


def _json(payload: dict[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(json.dumps(payload), status=status, content_type="application/json")


async def batches(request: StreamedRequest, runtime: GatewayRuntime) -> HttpResponse:
    """/v1/batches: POST creates, GET lists."""
    if request.method == "POST":
        return await _create(request)
    if request.method == "GET":
        return await _list(request)
    raise ApiError(405, "Use POST to create a batch, GET to list them.", "method_not_allowed")


async def one_batch(request: StreamedRequest, runtime: GatewayRuntime) -> HttpResponse:
    """/v1/batches/{id} (GET) and /v1/batches/{id}/cancel (POST)."""
    rest = request.path.removeprefix("/v1/batches/").rstrip("/")
    batch_id, _, tail = rest.partition("/")
    if tail == "cancel":
        if request.method != "POST":
            raise ApiError(405, "Use POST to cancel a batch.", "method_not_allowed")
        return _json(await _cancel(batch_id, request))
    if tail:
        raise ApiError(404, f"Unknown endpoint {request.path}.", "unknown_url")
    if request.method != "GET":
        raise ApiError(405, "Use GET for a batch.", "method_not_allowed")
    return _json(await _retrieve(batch_id, request))


async def _create(request: StreamedRequest) -> HttpResponse:
    raw = b"".join([chunk async for chunk in request.body])
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise ApiError(400, "The body must be a JSON object.", "invalid_json")
    fields = _checked_fields(payload)
    batch = await _create_row(fields, request)
    await _wake_runner()
    return _json(batch)


def _checked_fields(payload: dict[str, Any]) -> dict[str, Any]:
    input_file_id = payload.get("input_file_id")
    if not isinstance(input_file_id, str) or not input_file_id:
        raise ApiError(400, "'input_file_id' is required: the id of a file uploaded with purpose 'batch'.",
                       "missing_required_parameter", param="input_file_id")
    endpoint = payload.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise ApiError(400, f"Invalid value for 'endpoint': {str(endpoint)[:60]!r}; use one of {', '.join(ENDPOINTS)}.",
                       "invalid_value", param="endpoint")
    window = payload.get("completion_window")
    if window not in COMPLETION_WINDOWS:
        raise ApiError(400, f"Invalid value for 'completion_window': {str(window)[:20]!r}; use '24h'.",
                       "invalid_value", param="completion_window")
    metadata = payload.get("metadata")
    if metadata is not None and not _valid_metadata(metadata):
        raise ApiError(
            400, f"Invalid 'metadata': at most {MAX_METADATA_PAIRS} pairs of strings, keys up to "
            f"{MAX_METADATA_KEY} characters and values up to {MAX_METADATA_VALUE}.", "invalid_value", param="metadata",
        )
    return {"input_file_id": input_file_id, "endpoint": endpoint, "window": window, "metadata": metadata}


def _valid_metadata(metadata: object) -> bool:
    return (
        isinstance(metadata, dict)
        and len(metadata) <= MAX_METADATA_PAIRS
        and all(isinstance(k, str) and len(k) <= MAX_METADATA_KEY for k in metadata)
        and all(isinstance(v, str) and len(v) <= MAX_METADATA_VALUE for v in metadata.values())
    )


@sync_to_async
def _create_row(fields: dict[str, Any], request: StreamedRequest) -> dict[str, Any]:
    close_old_connections()  # no request cycle closes this thread's connection on the gateway
    owner_id, key_id = request.key.owner_id, request.key.id
    reachable = BatchFile.objects.reachable_by(key_id, owner_id)
    input_file = reachable.filter(public_id=fields["input_file_id"]).first()
    if input_file is None:
        raise ApiError(404, f"No such File object: {fields['input_file_id'][:64]}", "file_not_found",
                       param="input_file_id")
    if input_file.purpose != "batch":
        raise ApiError(400, f"The file {input_file.public_id} was uploaded with purpose '{input_file.purpose}'; "
                       "a batch's input needs purpose 'batch'.", "invalid_value", param="input_file_id")
    unfinished = Batch.objects.of_owner(owner_id).unfinished().count()
    if unfinished >= settings.GP_MAX_UNFINISHED_BATCHES_PER_USER:
        raise ApiError(
            429, f"You have {unfinished} batches still running, the most one person may "
            "(GP_MAX_UNFINISHED_BATCHES_PER_USER); wait for one to end, or cancel one.", "too_many_batches",
            retry_after=60,
        )
    storage_quota.refuse_if_full(owner_id)  # its results would only add to a full store
    now = timezone.now()
    BatchFile.objects.filter(pk=input_file.pk).touch(now)
    batch = Batch.objects.create(
        public_id=new_batch_id(), owner_id=owner_id, api_key_id=key_id, input_file=input_file,
        input_file_public_id=input_file.public_id, input_bytes=input_file.bytes, endpoint=fields["endpoint"],
        completion_window=fields["window"], metadata=fields["metadata"], created_at=now,
        expires_at=now + COMPLETION_WINDOWS[fields["window"]],
    )
    return batch_object(batch)


@sync_to_async
def _wake_runner() -> None:
    """Start a runner now rather than at the next beat. Best effort: beat starts one anyway."""
    from fairness.batch.tasks import run_batches

    try:
        run_batches.apply_async(expires=settings.GP_BATCH_POLL_SECONDS * 2)
    except Exception:  # noqa: BLE001 -- the broker being away must not fail the create
        log.warning("could not wake the batch runner; beat will", exc_info=True)


async def _list(request: StreamedRequest) -> HttpResponse:
    query = {name: values[-1] for name, values in parse_qs(request.query_string).items()}
    raw_limit = query.get("limit")
    if raw_limit is None:
        limit = DEFAULT_LIST_LIMIT
    elif raw_limit.isdigit() and 1 <= int(raw_limit) <= MAX_LIST_LIMIT:
        limit = int(raw_limit)
    else:
        raise ApiError(400, f"Invalid value for 'limit': {raw_limit[:20]!r}; use 1 to {MAX_LIST_LIMIT}.",
                       "invalid_value", param="limit")
    data, has_more = await _page(request, query.get("after"), limit)
    return _json({
        "object": "list", "data": data, "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None, "has_more": has_more,
    })


def _with_files() -> BatchQuerySet:
    return Batch.objects.select_related("output_file", "error_file")


@sync_to_async
def _page(request: StreamedRequest, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
    """One page of the batches the key reaches, newest first; whether more follow."""
    close_old_connections()
    rows = _with_files().reachable_by(request.key.id, request.key.owner_id)
    if after is not None:
        cursor = rows.filter(public_id=after).values_list("id", flat=True).first()
        if cursor is None:
            raise ApiError(400, f"Invalid value for 'after': no such Batch object: {after[:64]}", "invalid_value",
                           param="after")
        rows = rows.filter(id__lt=cursor)
    page = list(rows.order_by("-id")[: limit + 1])
    return [batch_object(row) for row in page[:limit]], len(page) > limit


def _owned(batch_id: str, request: StreamedRequest) -> Batch:
    batch = _with_files().reachable_by(request.key.id, request.key.owner_id).filter(public_id=batch_id).first()
    if batch is None:
        raise ApiError(404, f"No such Batch object: {batch_id[:64]}", "batch_not_found", param="batch_id")
    return batch


@sync_to_async
def _retrieve(batch_id: str, request: StreamedRequest) -> dict[str, Any]:
    close_old_connections()
    return batch_object(_owned(batch_id, request))


@sync_to_async
def _cancel(batch_id: str, request: StreamedRequest) -> dict[str, Any]:
    close_old_connections()
    batch = _owned(batch_id, request)
    if not control.cancel(batch) and batch.status not in (BatchStatus.CANCELLING, BatchStatus.CANCELLED):
        raise ApiError(409, f"The batch is {batch.status}: there is nothing left to cancel.", "batch_not_cancellable")
    return batch_object(_owned(batch_id, request))
