"""/v1/files: OpenAI's Files API, for batch input (and later, batch output).

A file belongs to the key's owner: any of their keys sees it, anyone else's gets 404, as for a
file that never was (a 403 would say it exists). The views run under the gateway's streamed
routes (gateway/streamed_body.py): the upload reads its body as it arrives.
"""

from __future__ import annotations

import json
import logging
import secrets
import string
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpResponse, StreamingHttpResponse

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
    """The File object, as OpenAI's reference has it (status and status_details are deprecated
    there, but still sent)."""
    return {
        "id": row.public_id, "object": "file", "bytes": row.bytes, "created_at": int(row.created_at.timestamp()),
        "filename": row.filename, "purpose": row.purpose, "status": "processed", "status_details": None,
        "expires_at": None,
    }  # fmt: skip


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
        return await _content(await _owned(file_id, request.key.owner_id), request.request_id)
    if request.method == "GET":
        return _json(file_object(await _owned(file_id, request.key.owner_id)))
    if request.method == "DELETE":
        await _delete(await _owned(file_id, request.key.owner_id))
        return _json({"id": file_id, "object": "file", "deleted": True})
    raise ApiError(405, "Use GET or DELETE for a file.", "method_not_allowed")


async def _upload(request: StreamedRequest) -> HttpResponse:
    owner_id = request.key.owner_id
    held = await _count_files(owner_id)
    if held >= settings.GP_MAX_BATCH_FILES_PER_USER:
        raise ApiError(
            403, f"You keep {held} files already, the most one person may (GP_MAX_BATCH_FILES_PER_USER); delete "
            "some (DELETE /v1/files/{file_id}) first.", "file_limit_reached",
        )  # fmt: skip
    try:
        upload = await receive_upload(
            aiter(request.body), request.headers.get("content-type"), settings.GP_MAX_BATCH_FILE_BYTES
        )
    except OSError:
        log.exception("could not store an upload for %s", request.request_id)
        raise ApiError(503, "The portal could not store the file; try again later.", "storage_unavailable",
                       retry_after=30) from None  # fmt: skip
    return _json(file_object(await _create_row(upload, owner_id, request.key.id)))


async def _list(request: StreamedRequest) -> HttpResponse:
    query = {name: values[-1] for name, values in parse_qs(request.query_string).items()}
    limit = _limit(query.get("limit"))
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"Invalid value for 'order': {order[:20]!r}; use 'asc' or 'desc'.", "invalid_value",
                       param="order")  # fmt: skip
    rows, has_more = await _page(request.key.owner_id, query.get("purpose"), query.get("after"), order, limit)
    data = [file_object(row) for row in rows]
    return _json({
        "object": "list", "data": data, "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None, "has_more": has_more,
    })  # fmt: skip


def _limit(raw: str | None) -> int:
    if raw is None:
        return MAX_LIST_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIST_LIMIT:
        raise ApiError(400, f"Invalid value for 'limit': {raw[:20]!r}; use 1 to {MAX_LIST_LIMIT}.",
                       "invalid_value", param="limit")  # fmt: skip
    return int(raw)


async def _content(row: BatchFile, request_id: str) -> StreamingHttpResponse:
    try:
        content = await StoredContent.open(row.stored_name)
    except OSError:
        log.exception("could not read the stored content of %s for %s", row.public_id, request_id)
        raise ApiError(503, "The portal could not read the file; try again later.", "storage_unavailable",
                       retry_after=30) from None  # fmt: skip
    response = StreamingHttpResponse(content, content_type="application/octet-stream")
    # A length, so a download cut short is seen as such (and the adapter sends nothing after it).
    response["Content-Length"] = str(row.bytes)
    response["Content-Disposition"] = f'attachment; filename="{row.public_id}.jsonl"'
    return response


def _not_found(file_id: str) -> ApiError:
    return ApiError(404, f"No such File object: {file_id[:64]}", "file_not_found", param="file_id")


@sync_to_async
def _owned(file_id: str, owner_id: int) -> BatchFile:
    """The owner's file, or 404 (whether it is someone else's or nobody's)."""
    close_old_connections()  # no request cycle closes this thread's connection on the gateway
    row = BatchFile.objects.of_owner(owner_id).filter(public_id=file_id).first()
    if row is None:
        raise _not_found(file_id)
    return row


@sync_to_async
def _count_files(owner_id: int) -> int:
    close_old_connections()
    return BatchFile.objects.of_owner(owner_id).filter(purpose="batch").count()


@sync_to_async
def _create_row(upload: Upload, owner_id: int, key_id: int) -> BatchFile:
    close_old_connections()
    return BatchFile.objects.create(
        public_id=new_file_id(), owner_id=owner_id, uploaded_with_id=key_id, purpose=upload.purpose,
        filename=upload.filename, bytes=upload.bytes, stored_name=upload.stored_name,
    )  # fmt: skip


@sync_to_async
def _delete(row: BatchFile) -> None:
    close_old_connections()
    row.delete()  # the stored content goes with it (fairness/models.py)


@sync_to_async
def _page(
    owner_id: int, purpose: str | None, after: str | None, order: str, limit: int
) -> tuple[list[BatchFile], bool]:
    """One page of the owner's files, newest first for "desc"; whether more follow."""
    close_old_connections()
    rows = BatchFile.objects.of_owner(owner_id)
    if purpose is not None:
        rows = rows.filter(purpose=purpose)
    if after is not None:
        cursor = BatchFile.objects.of_owner(owner_id).filter(public_id=after).values_list("id", flat=True).first()
        if cursor is None:
            raise ApiError(400, f"Invalid value for 'after': no such File object: {after[:64]}", "invalid_value",
                           param="after")  # fmt: skip
        rows = rows.filter(id__gt=cursor) if order == "asc" else rows.filter(id__lt=cursor)
    page = list(rows.order_by("id" if order == "asc" else "-id")[: limit + 1])
    return page[:limit], len(page) > limit
