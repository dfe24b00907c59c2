"""Batch files on disk: the limits the batch-file tests' gateway runs with, a storage directory
emptied for each test (this process stores there too), what is in it, and JSONL to upload."""

from __future__ import annotations

import shutil
from pathlib import Path

# The batch-file tests' gateway: a file limit just above the 200 MiB memory test, five files a person.
FILE_LIMIT = 202 * 1024 * 1024
FILES_PER_USER = 5
BODY_TIMEOUT = 4.0  # a gap this long in an upload gets 408


def empty_storage(directory: Path, settings) -> Path:
    """The storage directory, empty at the start of each test; this process stores there too."""
    for entry in directory.iterdir():
        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    settings.STORAGES = {
        **settings.STORAGES,
        "batch_files": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                        "OPTIONS": {"location": str(directory)}},
    }
    return directory


def files_on_disk(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.is_file())


def jsonl(lines: int = 3) -> bytes:
    return b"".join(
        b'{"custom_id": "req-%d", "method": "POST", "url": "/v1/chat/completions", '
        b'"body": {"model": "sim", "messages": [{"role": "user", "content": "hi"}]}}\n' % n
        for n in range(lines)
    )
