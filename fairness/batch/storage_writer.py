"""Writing an upload to the batch-file storage while it streams in, off the event loop.

Django's storage API is synchronous and pulls: `storage.save(name, file)` reads the file until it
ends. So a thread of our own runs the save, reading from a pipe the event loop fills chunk by
chunk. The pipe holds a few chunks at most: a slow disk (or object store) slows the upload down,
the memory stays flat. Our own threads, not asyncio's default pool nor asgiref's one thread for
the database: an upload holds its thread for as long as it lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, cast

from django.core.files import File
from django.core.files.storage import Storage, storages

from fairness.models import BATCH_FILES_STORAGE

log = logging.getLogger(__name__)

PIPE_DEPTH = 4  # chunks the loop may hand on before the writer has taken the first
_END = b""
_ABORT = object()
FILE_IO = ThreadPoolExecutor(max_workers=8, thread_name_prefix="batch-file-io")


def batch_storage() -> Storage:
    return storages[BATCH_FILES_STORAGE]


def new_stored_name() -> str:
    """An unguessable name, spread over 256 directories; never anything the client sent."""
    token = secrets.token_hex(16)
    return f"{token[:2]}/{token}.jsonl"


class UploadAborted(Exception):
    pass


class _PipeReader:
    """The writer thread's end of the pipe: a file-like object that blocks until data comes."""

    def __init__(self, pieces: queue.SimpleQueue[Any], taken: Any) -> None:
        self._pieces = pieces
        self._taken = taken  # called (thread-safe) each time a piece leaves the pipe
        self._rest = b""
        self._ended = False

    def read(self, size: int = -1) -> bytes:
        while not self._ended and (size < 0 or len(self._rest) < size):
            piece = self._pieces.get()
            self._taken()
            if piece is _ABORT:
                raise UploadAborted
            if piece == _END:
                self._ended = True
            self._rest += piece
        if size < 0:
            data, self._rest = self._rest, b""
        else:
            data, self._rest = self._rest[:size], self._rest[size:]
        return data


class StorageWriter:
    """Saves one upload under a new name: `await write(chunk)` as it comes, then `await finish()`
    for the name it was saved under. On any failure or cancellation, `await discard()`."""

    def __init__(self, storage: Storage | None = None) -> None:
        self.storage = storage or batch_storage()
        self.name = new_stored_name()
        loop = asyncio.get_running_loop()
        self._room = asyncio.Semaphore(PIPE_DEPTH)
        self._pieces: queue.SimpleQueue[Any] = queue.SimpleQueue()
        reader = _PipeReader(self._pieces, lambda: loop.call_soon_threadsafe(self._room.release))
        content = File(cast(IO[Any], reader), name=self.name)
        self._saving = loop.run_in_executor(FILE_IO, self.storage.save, self.name, content)
        # A writer that fails early must not leave the loop waiting for room in the pipe.
        self._saving.add_done_callback(lambda _: self._room.release())

    async def write(self, chunk: bytes) -> None:
        await self._room.acquire()
        if self._saving.done():
            self._saving.result()  # raises what stopped the writer
            raise UploadAborted
        self._pieces.put(chunk)

    async def finish(self) -> str:
        self._pieces.put(_END)
        self.name = await self._saving
        return self.name

    async def discard(self) -> None:
        """Stop the writer and delete what it wrote; never raises (it runs while another error
        is on its way out). Callers shield it, so a second cancellation cannot cut it short."""
        self._pieces.put(_ABORT)
        with contextlib.suppress(Exception):  # what stopped it is the caller's to report
            await self._saving
        try:
            await asyncio.get_running_loop().run_in_executor(FILE_IO, self.storage.delete, self.name)
        except Exception:
            log.exception("could not delete the partial upload %s", self.name)
