"""A gateway of its own for the batch-file tests: its files in a directory the tests can read, a
file limit just above the 200 MiB memory test, five files a person, and a
body timeout short enough to test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.batch_files import BODY_TIMEOUT, FILE_LIMIT, FILES_PER_USER, empty_storage
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import start_gateway


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
