"""The streaming multipart reader gives the same parts however the body is cut into chunks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from fairness.batch.multipart import MAX_PARTS, MultipartError, PartData, PartEnd, PartStart, boundary_of, events

BODY = (
    b"preamble to ignore\r\n"
    b"--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
    b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"r\xc3\xa9sum\xc3\xa9.jsonl\"\r\n"
    b"Content-Type: application/jsonl\r\n\r\n"
    b"{\"a\": \"--XyZ is not a boundary here\"}\r\n{}\n\r\n--XyZ-- epilogue"
)
PARTS = [("purpose", None, b"batch"),
         ("file", "résumé.jsonl", b"{\"a\": \"--XyZ is not a boundary here\"}\r\n{}\n")]


async def _chunks(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


def parts(body: bytes, chunk_size: int, boundary: bytes = b"XyZ") -> list[tuple[str, str | None, bytes]]:
    async def collect() -> list[tuple[str, str | None, bytes]]:
        found: list[tuple[str, str | None, bytes]] = []
        data = b""
        async for event in events(_chunks(body, chunk_size), boundary):
            if isinstance(event, PartStart):
                name, filename, data = event.name, event.filename, b""
            elif isinstance(event, PartData):
                data += event.data
            else:
                assert isinstance(event, PartEnd)
                found.append((name, filename, data))
        return found

    return asyncio.run(collect())


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5, 7, 11, 64, len(BODY)])
def test_every_cut_gives_the_same_parts(chunk_size):
    assert parts(BODY, chunk_size) == PARTS


def test_a_body_cut_before_its_closing_boundary_is_malformed():
    with pytest.raises(MultipartError, match="ended before"):
        parts(BODY[: BODY.index(b"--XyZ--")], 4)


@pytest.mark.parametrize("content_type", [None, "", "application/json", "multipart/form-data",
                                          "multipart/form-data; boundary=" + "b" * 71, "multipart/mixed; boundary=b"])
def test_only_form_data_with_a_boundary_is_taken(content_type):
    with pytest.raises(MultipartError):
        boundary_of(content_type)
    assert boundary_of('multipart/form-data; boundary="a b"') == b"a b"


def field(name: bytes, headers: bytes = b"") -> bytes:
    return b'--XyZ\r\nContent-Disposition: form-data; name="' + name + b'"\r\n' + headers + b"\r\nv\r\n"


def test_a_form_of_more_parts_than_an_upload_has_is_refused_at_the_part_past_the_limit():
    eight = b"".join(field(b"f%d" % n) for n in range(MAX_PARTS))
    assert len(parts(eight + b"--XyZ--\r\n", 64)) == MAX_PARTS
    with pytest.raises(MultipartError, match=f"more than {MAX_PARTS} parts"):
        parts(eight + field(b"one-more") + b"--XyZ--\r\n", 64)


@pytest.mark.parametrize("headers", [b"X-Pad: " + b"y" * 17 * 1024 + b"\r\n", (b"X-Pad: " + b"y" * 1500 + b"\r\n") * 3,
                                     b"X-Pad: y\r\n" * 5],
                         ids=["one-17-kib-line", "4.5-kib-in-three-lines", "five-headers"])
def test_a_part_s_headers_past_their_limit_are_refused_even_when_they_come_in_one_chunk(headers):
    body = field(b"file", headers) + b"--XyZ--\r\n"
    with pytest.raises(MultipartError, match="headers are too long"):
        parts(body, len(body))
    assert len(parts(field(b"file", b"Content-Type: application/jsonl\r\n") + b"--XyZ--\r\n", 4096)) == 1
