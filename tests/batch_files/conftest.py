"""A gateway of its own for the batch-file tests: its files in a directory the tests can read, a
file limit just above the 200 MiB memory test, five files a person, and a
body timeout short enough to test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway_process import GatewayProcess
from tests.support.processes import start_gateway

FILE_LIMIT = 202 * 1024 * 1024
FILES_PER_USER = 5
BODY_TIMEOUT = 4.0  # a gap this long in an upload gets 408


@pytest.fixture(scope="session")
def batch_files_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("batch-files")


@pytest.fixture(scope="session")
def gateway_session(live_db_url: str, batch_files_dir: Path) -> Iterator[GatewayProcess]:
    process = start_gateway(
        live_db_url, name="gateway-batch-files", GP_BATCH_FILES_DIR=str(batch_files_dir),
        GP_MAX_BATCH_FILE_BYTES=str(FILE_LIMIT), GP_MAX_BATCH_FILES_PER_USER=str(FILES_PER_USER),
        GP_CLIENT_BODY_TIMEOUT_SECONDS=str(BODY_TIMEOUT),
    )
    yield process
    process.stop()


@pytest.fixture(autouse=True)
def stored_files(batch_files_dir: Path, settings) -> Path:
    return empty_storage(batch_files_dir, settings)


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
