"""/v1/files: OpenAI's Files API, for batch input and output.

A file belongs to the key's owner: any key they made themselves sees it, a key staff or a command
issued for them only the files it uploaded or its batches wrote (whoever issued it saw its
secret); anyone else gets 404, as for a file that never was (a 403 would say it exists). An
upload reserves its room first (storage_quota.py), so limits hold however many arrive at once.
The views run under the gateway's streamed routes (gateway/streamed_body.py): the upload reads
its body as it arrives.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import string
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.http import HttpResponse, StreamingHttpResponse

from fairness.batch import retention, storage_quota
from fairness.batch.storage_writer import batch_storage
from fairness.batch.stored_content import StoredContent
from fairness.batch.uploads import Upload, receive_upload
from fairness.gateway.errors import ApiError
from fairness.gateway.runtime import GatewayRuntime
from fairness.gateway.streamed_body import StreamedRequest
from fairness.models import BatchFile

log = logging.getLogger(__name__)

ID_ALPHABET = string.ascii_letters + string.digits
MAX_LIST_LIMIT = 10_000  # OpenAI's range for `limit` is 1 to 10,000, and 10,000 its default


def new_file_id() -> str:
    return "file-" + "".join(secrets.choice(ID_ALPHABET) for _ in range(24))


def file_object(row: BatchFile) -> dict[str, Any]:
    """The File object, as OpenAI's OpenAPI document has it (status is deprecated there but
    required, and still sent; status_details, a string when there is one, is left out);
    expires_at is when retention deletes it unless it is used again."""
    return {
        "id": row.public_id, "object": "file", "bytes": row.bytes, "created_at": int(row.created_at.timestamp()),
        "filename": row.filename, "purpose": row.purpose, "status": "processed",
        "expires_at": int(retention.expires_at(row).timestamp()),
    }


def _json(payload: dict[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(json.dumps(payload), status=status, content_type="application/json")


async def files(request: StreamedRequest, runtime: GatewayRuntime) -> HttpResponse:
    """/v1/files: POST uploads, GET lists."""
    if request.method == "POST":
        return await _upload(request)
    if request.method == "GET":
        return await _list(request)
    raise ApiError(405, "Use POST to upload a file, GET to list them.", "method_not_allowed")


async def one_file(request: StreamedRequest, runtime: GatewayRuntime) -> HttpResponse | StreamingHttpResponse:
    """/v1/files/{id} (GET, DELETE) and /v1/files/{id}/content (GET)."""
    rest = request.path.removeprefix("/v1/files/").rstrip("/")
    file_id, _, tail = rest.partition("/")
    if tail not in ("", "content"):
        raise ApiError(404, f"Unknown endpoint {request.path}.", "unknown_url")
    if tail == "content":
        if request.method != "GET":
            raise ApiError(405, "Use GET for a file's content.", "method_not_allowed")
        row = await _owned(file_id, request)
        await _touch(row)
        return await _content(row, request.request_id)
    if request.method == "GET":
        return _json(file_object(await _owned(file_id, request)))
    if request.method == "DELETE":
        await _delete(await _owned(file_id, request))
        return _json({"id": file_id, "object": "file", "deleted": True})
    raise ApiError(405, "Use GET or DELETE for a file.", "method_not_allowed")


async def _upload(request: StreamedRequest) -> HttpResponse:
    reservation = await _reserve(request.key.owner_id, request.key.id, _declared_length(request))
    try:
        try:
            upload = await receive_upload(
                aiter(request.body), request.headers.get("content-type"), reservation.max_bytes
            )
        except ApiError as exc:
            if exc.code == "file_too_large" and reservation.quota_bound:  # past the room left, not the size limit
                raise storage_quota.quota_refusal(await _used_bytes(request.key.owner_id)) from None
            raise
        except OSError:
            log.exception("could not store an upload for %s", request.request_id)
            raise ApiError(503, "The portal could not store the file; try again later.", "storage_unavailable",
                           retry_after=30) from None
    except BaseException:
        await asyncio.shield(_release(reservation))
        raise
    return _json(file_object(await _complete(reservation, upload)))


def _declared_length(request: StreamedRequest) -> int | None:
    raw = request.headers.get("content-length", "")
    return int(raw) if raw.isdigit() else None


async def _list(request: StreamedRequest) -> HttpResponse:
    query = {name: values[-1] for name, values in parse_qs(request.query_string).items()}
    limit = _limit(query.get("limit"))
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"Invalid value for 'order': {order[:20]!r}; use 'asc' or 'desc'.", "invalid_value",
                       param="order")
    rows, has_more = await _page(request, query.get("purpose"), query.get("after"), order, limit)
    data = [file_object(row) for row in rows]
    return _json({
        "object": "list", "data": data, "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None, "has_more": has_more,
    })


def _limit(raw: str | None) -> int:
    if raw is None:
        return MAX_LIST_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIST_LIMIT:
        raise ApiError(400, f"Invalid value for 'limit': {raw[:20]!r}; use 1 to {MAX_LIST_LIMIT}.",
                       "invalid_value", param="limit")
    return int(raw)


async def _content(row: BatchFile, request_id: str) -> StreamingHttpResponse:
    try:
        content = await StoredContent.open(row.stored_name)
    except OSError:
        log.exception("could not read the stored content of %s for %s", row.public_id, request_id)
        raise ApiError(503, "The portal could not read the file; try again later.", "storage_unavailable",
                       retry_after=30) from None
    response = StreamingHttpResponse(content, content_type="application/octet-stream")
    # A length, so a download cut short is seen as such (and the adapter sends nothing after it).
    response["Content-Length"] = str(row.bytes)
    response["Content-Disposition"] = f'attachment; filename="{row.public_id}.jsonl"'
    return response


def _not_found(file_id: str) -> ApiError:
    return ApiError(404, f"No such File object: {file_id[:64]}", "file_not_found", param="file_id")


@sync_to_async
def _owned(file_id: str, request: StreamedRequest) -> BatchFile:
    """The file if this key may reach it, or 404 (whether it is someone else's, out of the key's
    reach, or nobody's)."""
    close_old_connections()  # no request cycle closes this thread's connection on the gateway
    row = BatchFile.objects.reachable_by(request.key.id, request.key.owner_id).filter(public_id=file_id).first()
    if row is None:
        raise _not_found(file_id)
    return row


@sync_to_async
def _reserve(owner_id: int, key_id: int, declared_bytes: int | None) -> storage_quota.Reservation:
    close_old_connections()
    return storage_quota.reserve_upload(owner_id, key_id, declared_bytes, new_file_id())


@sync_to_async
def _used_bytes(owner_id: int) -> int:
    return storage_quota.used_bytes(owner_id)


@sync_to_async
def _release(reservation: storage_quota.Reservation) -> None:
    storage_quota.release(reservation)


@sync_to_async
def _complete(reservation: storage_quota.Reservation, upload: Upload) -> BatchFile:
    close_old_connections()
    try:
        return storage_quota.complete_upload(reservation, upload.filename, upload.purpose, upload.stored_name,
                                             upload.bytes)
    except LookupError:  # its reservation was given back meanwhile (a gateway thought dead)
        batch_storage().delete(upload.stored_name)
        raise ApiError(503, "The portal could not keep the file; upload it again.", "storage_unavailable",
                       retry_after=1) from None


@sync_to_async
def _touch(row: BatchFile) -> None:
    BatchFile.objects.filter(pk=row.pk).touch()


@sync_to_async
def _delete(row: BatchFile) -> None:
    close_old_connections()
    row.delete()  # the stored content goes with it (fairness/models.py)


@sync_to_async
def _page(
    request: StreamedRequest, purpose: str | None, after: str | None, order: str, limit: int
) -> tuple[list[BatchFile], bool]:
    """One page of the files the key reaches, newest first for "desc"; whether more follow."""
    close_old_connections()
    reachable = BatchFile.objects.reachable_by(request.key.id, request.key.owner_id)
    rows = reachable
    if purpose is not None:
        rows = rows.filter(purpose=purpose)
    if after is not None:
        cursor = reachable.filter(public_id=after).values_list("id", flat=True).first()
        if cursor is None:
            raise ApiError(400, f"Invalid value for 'after': no such File object: {after[:64]}", "invalid_value",
                           param="after")
        rows = rows.filter(id__gt=cursor) if order == "asc" else rows.filter(id__lt=cursor)
    page = list(rows.order_by("id" if order == "asc" else "-id")[: limit + 1])
    return page[:limit], len(page) > limit
