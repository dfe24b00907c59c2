"""A stored batch file sent back piece by piece, read off the event loop, never held whole."""

from __future__ import annotations

import asyncio
from typing import IO, Any

from fairness.batch.storage_writer import FILE_IO, batch_storage

CHUNK_BYTES = 256 * 1024


class StoredContent:
    """An async iterator over a stored file's bytes. Django's StreamingHttpResponse calls close()
    when the response is done with, whether the download finished or the client left."""

    def __init__(self, file: IO[Any]) -> None:
        self._file: IO[Any] | None = file

    @classmethod
    async def open(cls, stored_name: str) -> StoredContent:
        """Opened before the response starts, so a file that cannot be read is an error status, not
        a download cut short."""
        loop = asyncio.get_running_loop()
        return cls(await loop.run_in_executor(FILE_IO, batch_storage().open, stored_name, "rb"))

    def __aiter__(self) -> StoredContent:
        return self

    async def __anext__(self) -> bytes:
        if self._file is None:
            raise StopAsyncIteration
        chunk: bytes = await asyncio.get_running_loop().run_in_executor(FILE_IO, self._file.read, CHUNK_BYTES)
        if not chunk:
            self.close()
            raise StopAsyncIteration
        return chunk

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
