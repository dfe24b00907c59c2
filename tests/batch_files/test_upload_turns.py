"""Reading an upload gives the event loop a turn after every chunk, whatever the chunk held: a
40 MiB file streamed to storage and a flood of tiny parts (refused after the few parts an upload
may have) alike. Counted, not timed: a task that does nothing but count the loop's turns must
have counted at least one between any two chunks the reader takes."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

from fairness.batch.uploads import Upload, receive_upload
from fairness.gateway.errors import ApiError
from tests.batch_files.test_upload_event_loop import many_tiny_parts, one_plain_file
from tests.support.batch_files import FILE_LIMIT

CHUNK = 64 * 1024  # what the server hands on at a time


async def read_counting_turns(body: bytes) -> tuple[list[int], Upload | ApiError]:
    """The loop turns counted when the reader took each chunk, and what the upload came to."""
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    taken: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), CHUNK):
            taken.append(turns)
            yield body[start:start + CHUNK]

    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)
    try:
        result: Upload | ApiError = await receive_upload(chunks(), "multipart/form-data; boundary=b", FILE_LIMIT)
    except ApiError as exc:
        result = exc
    finally:
        counter.cancel()
    return taken, result


def test_a_large_file_gives_the_loop_a_turn_after_every_chunk():
    body = one_plain_file()
    taken, result = asyncio.run(read_counting_turns(body))

    assert isinstance(result, Upload), result
    assert result.bytes > len(body) - 1024
    assert len(taken) == -(-len(body) // CHUNK)  # every chunk was read, one at a time
    held = [index for index, (before, after) in enumerate(itertools.pairwise(taken)) if after == before]
    assert not held, f"no other task ran between chunks {held[:5]} and the next"


def test_a_flood_of_tiny_parts_is_refused_within_its_first_chunk_and_never_held_the_loop():
    taken, result = asyncio.run(read_counting_turns(many_tiny_parts()))

    assert isinstance(result, ApiError) and result.status == 400, result
    assert "more than 8 parts" in str(result)
    assert len(taken) == 1  # refused before a second chunk was asked for, not parsed to its end
    assert taken[0] >= 1

