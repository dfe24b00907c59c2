"""A multipart/form-data body read as it arrives (RFC 7578), never held whole.

Django's MultiPartParser reads a synchronous stream and Starlette's needs python-multipart; this
one reads the gateway's async body chunks and yields events: a part begins (its headers), a piece
of its content, the part ends. A part's content is handed on piece by piece, so a file part of
any size costs the memory of one chunk and a boundary's length.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from django.utils.http import parse_header_parameters

MAX_PART_HEADER_BYTES = 16 * 1024
MAX_PREAMBLE_BYTES = 64 * 1024


class MultipartError(ValueError):
    """The body is not the multipart/form-data it said it was; the message says how."""


@dataclass(frozen=True)
class PartStart:
    name: str
    filename: str | None  # None for a plain field; a file part has one, maybe empty


@dataclass(frozen=True)
class PartData:
    data: bytes


@dataclass(frozen=True)
class PartEnd:
    pass


Event = PartStart | PartData | PartEnd


def boundary_of(content_type: str | None) -> bytes:
    """The boundary a multipart/form-data Content-Type names; MultipartError for anything else."""
    kind, params = parse_header_parameters(content_type or "")
    if kind != "multipart/form-data":
        raise MultipartError("Send the file as multipart/form-data (a 'file' part and a 'purpose' field).")
    boundary = params.get("boundary", "")
    if not 1 <= len(boundary) <= 70 or not boundary.isascii():
        raise MultipartError("The multipart/form-data Content-Type has no valid boundary.")
    return boundary.encode("ascii")


async def events(chunks: AsyncIterator[bytes], boundary: bytes) -> AsyncIterator[Event]:
    """The body's parts as events, in order; MultipartError if it is malformed or ends early."""
    delimiter = b"\r\n--" + boundary
    keep = len(delimiter) + 1  # bytes held back in case a delimiter (and what follows) straddles chunks
    buffer = b"\r\n"  # so that a body starting with its first boundary matches the delimiter too
    state = "preamble"
    async for chunk in chunks:
        buffer += chunk
        while True:
            if state == "preamble":
                at = buffer.find(delimiter)
                if at < 0:
                    if len(buffer) > MAX_PREAMBLE_BYTES:
                        raise MultipartError("The multipart body has no boundary where its first part should begin.")
                    break
                buffer, state = buffer[at + len(delimiter):], "after boundary"
            elif state == "after boundary":
                if len(buffer) < 2:
                    break
                if buffer.startswith(b"--"):
                    return  # the closing boundary: the epilogue, if any, is ignored
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > 256:
                        raise MultipartError("A multipart boundary line is malformed.")
                    break
                if buffer[:end].strip(b" \t"):
                    raise MultipartError("A multipart boundary line is malformed.")
                buffer, state = buffer[end + 2:], "headers"
            elif state == "headers":
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > MAX_PART_HEADER_BYTES:
                        raise MultipartError("A multipart part's headers are too long.")
                    break
                yield _part_start(buffer[:end])
                buffer, state = buffer[end + 4:], "content"
            else:  # content
                at = buffer.find(delimiter)
                if at < 0:
                    if len(buffer) > keep:
                        yield PartData(buffer[:-keep])
                        buffer = buffer[-keep:]
                    break
                if at:
                    yield PartData(buffer[:at])
                yield PartEnd()
                buffer, state = buffer[at + len(delimiter):], "after boundary"
    raise MultipartError("The multipart body ended before its closing boundary.")


def _part_start(block: bytes) -> PartStart:
    disposition = None
    for line in block.split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if not colon:
            raise MultipartError("A multipart part has a malformed header line.")
        if name.strip().lower() == b"content-disposition":
            # RFC 7578 allows UTF-8 in a filename; whatever else comes is kept as latin-1 (no error).
            try:
                disposition = value.decode("utf-8")
            except UnicodeDecodeError:
                disposition = value.decode("latin-1")
    if disposition is None:
        raise MultipartError("A multipart part has no Content-Disposition header.")
    kind, params = parse_header_parameters(disposition)
    if kind != "form-data" or "name" not in params:
        raise MultipartError("A multipart part's Content-Disposition is not form-data with a name.")
    return PartStart(name=params["name"], filename=params.get("filename"))
