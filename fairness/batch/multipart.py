"""A multipart/form-data body read as it arrives (RFC 7578), never held whole.

Django's MultiPartParser reads a synchronous stream; this reads the gateway's async body chunks
and yields events: a part begins (its headers), a piece of its content, the part ends. The
parsing is the `multipart` package's PushMultipartParser (sans-IO: fed one chunk at a time, its
work linear in the bytes fed). A part's content is handed on piece by piece, so a file part of any
size costs the memory of one chunk and a boundary's length.

What a form may hold is bounded, so that a body of many tiny parts or endless headers is refused
after a few of them rather than parsed to its end: an upload takes `file` and `purpose` (and
OpenAI's two `expires_after` fields), so MAX_PARTS leaves room for a few more, and a part's headers
are a Content-Disposition and a Content-Type. Between chunks the event loop gets a turn, whatever
a chunk held.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import multipart
from django.utils.http import parse_header_parameters

MAX_PARTS = 8
MAX_PART_HEADER_BYTES = 4 * 1024  # a part's whole header block
MAX_PART_HEADERS = 4  # RFC 7578 names three a part may have
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
    """The body's parts as events, in order; MultipartError if it is malformed, ends early or
    goes past the limits above."""
    parser = multipart.PushMultipartParser(
        boundary, max_header_size=MAX_PART_HEADER_BYTES, max_header_count=MAX_PART_HEADERS,
        max_segment_count=MAX_PARTS,
    )
    before_first_part = 0
    parts = 0
    async for chunk in chunks:
        for event in _parsed(parser, chunk):
            if isinstance(event, multipart.MultipartSegment):
                parts += 1
                yield _part_start(event)
            elif event is None:
                yield PartEnd()
            else:
                yield PartData(bytes(event))
        if not parts:
            before_first_part += len(chunk)
            if before_first_part > MAX_PREAMBLE_BYTES:
                raise MultipartError("The multipart body has no boundary where its first part should begin.")
        await asyncio.sleep(0)  # however much a chunk held, others run before the next one
    try:
        parser.close()  # what came after the closing boundary, if any, was ignored
    except multipart.MultipartError:
        raise MultipartError("The multipart body ended before its closing boundary.") from None


def _parsed(parser: Any, chunk: bytes) -> list[Any]:
    """The parser's events for one chunk, its errors said as ours."""
    try:
        return list(parser.parse(chunk))
    except multipart.ParserLimitReached as exc:
        raise MultipartError(_limit_message(str(exc))) from None
    except multipart.MultipartError as exc:
        raise MultipartError(f"The multipart body is malformed: {_sentence(str(exc))}") from None


def _limit_message(detail: str) -> str:
    if detail == "Maximum segment count exceeded":
        return (f"The form has more than {MAX_PARTS} parts; an upload takes a 'file' part and a 'purpose' "
                "field.")
    return (f"A multipart part's headers are too long (at most {MAX_PART_HEADERS} headers and "
            f"{MAX_PART_HEADER_BYTES // 1024} KiB).")


def _sentence(detail: str) -> str:
    return detail[:1].lower() + detail[1:].rstrip(".") + "."


def _part_start(segment: Any) -> PartStart:
    header_bytes = sum(len(name) + len(value) + 4 for name, value in segment.headerlist)  # ": " and CRLF
    if header_bytes > MAX_PART_HEADER_BYTES:
        raise MultipartError(_limit_message("header"))
    if not segment.name:
        raise MultipartError("A multipart part's Content-Disposition is not form-data with a name.")
    return PartStart(name=str(segment.name), filename=None if segment.filename is None else str(segment.filename))
