"""One POST /v1/files form, read as it arrives: the file part streamed to storage and checked on
the way, the `purpose` field kept, anything else skipped.

Whatever goes wrong (a bad form, a file past the limit, a client gone, a full disk), the partial
file is deleted before the error goes on: only a whole, checked file is left in storage.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fairness.batch.jsonl_check import JsonlCheck
from fairness.batch.multipart import MultipartError, PartData, PartEnd, PartStart, boundary_of, events
from fairness.batch.storage_writer import StorageWriter
from fairness.gateway.errors import ApiError
from fairness.gateway.streamed_body import mebibytes

PURPOSES = ("batch",)  # what this portal keeps files for (OpenAI has more)
MAX_FIELD_BYTES = 1024


@dataclass(frozen=True)
class Upload:
    filename: str
    purpose: str
    stored_name: str
    bytes: int


def safe_filename(raw: str | None) -> str:
    """The client's name for its file, for showing only: the last part of any path, printable."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(char for char in name if char.isprintable()).strip()
    return name[:255] if name not in ("", ".", "..") else "upload.jsonl"


def check_purpose(purpose: bytes | None) -> str:
    if purpose is None:
        raise ApiError(400, "Missing required parameter: 'purpose'.", "missing_required_parameter", param="purpose")
    text = purpose.decode("utf-8", "replace").strip()
    if text not in PURPOSES:
        raise ApiError(
            400, f"Invalid value for 'purpose': {text[:40]!r}. This portal keeps files for the Batch API "
            "only: use 'batch'.", "invalid_value", param="purpose",
        )
    return text


class _Form:
    """The state of one form being read."""

    def __init__(self, max_file_bytes: int) -> None:
        self.max_file_bytes = max_file_bytes
        self.purpose: bytes | None = None
        self.filename: str | None = None
        self.writer: StorageWriter | None = None
        self.size = 0
        self.check = JsonlCheck()
        self._reading: str | None = None  # "file", "purpose", or None for a part skipped

    async def take(self, event: PartStart | PartData | PartEnd) -> None:
        if isinstance(event, PartStart):
            self._start(event)
        elif isinstance(event, PartData):
            await self._data(event.data)
        else:
            if self._reading == "file":
                self.check.finish()
            self._reading = None

    def _start(self, part: PartStart) -> None:
        if part.name == "file":
            if self.writer is not None:
                raise ApiError(400, "Send one file per upload.", "invalid_request", param="file")
            if self.purpose is not None:
                check_purpose(self.purpose)  # refuse before storing anything
            self.filename = safe_filename(part.filename)
            self.writer = StorageWriter()
            self._reading = "file"
        elif part.name == "purpose":
            self.purpose, self._reading = b"", "purpose"
        else:
            self._reading = None  # e.g. expires_after: batch files are kept until deleted

    async def _data(self, data: bytes) -> None:
        if self._reading == "file":
            assert self.writer is not None
            self.size += len(data)
            if self.size > self.max_file_bytes:
                raise ApiError(
                    413, f"The file is larger than the limit of {mebibytes(self.max_file_bytes)}; split it "
                    "into smaller batches.", "file_too_large", param="file",
                )
            self.check.feed(data)
            await self.writer.write(data)
        elif self._reading == "purpose":
            assert self.purpose is not None
            self.purpose += data
            if len(self.purpose) > MAX_FIELD_BYTES:
                raise ApiError(400, "The 'purpose' field is too long.", "invalid_value", param="purpose")


async def receive_upload(body: AsyncIterator[bytes], content_type: str | None, max_file_bytes: int) -> Upload:
    """Read the form and store its file; ApiError (400, 413) for what cannot be taken."""
    form = _Form(max_file_bytes)
    try:
        try:
            async for event in events(body, boundary_of(content_type)):
                await form.take(event)
        except MultipartError as exc:
            raise ApiError(400, str(exc), "invalid_multipart") from None
        if form.writer is None:
            raise ApiError(400, "Missing required parameter: 'file'.", "missing_required_parameter", param="file")
        purpose = check_purpose(form.purpose)
        stored_name = await form.writer.finish()
    except BaseException:
        if form.writer is not None:
            await asyncio.shield(form.writer.discard())
        raise
    assert form.filename is not None
    return Upload(filename=form.filename, purpose=purpose, stored_name=stored_name, bytes=form.size)
