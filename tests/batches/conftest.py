"""Batches end to end: a gateway and a Celery worker that runs batches (with beat, on both queues),
sharing one batch-file directory, in front of the session's enginesim replica."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.batch_files import empty_storage
from tests.support.batches import RUNNER_ENV
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import LOG_DIR, free_port, gateway_env, start_gateway
from tests.support.worker_process import WorkerProcess


@pytest.fixture(scope="session")
def batch_files_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("batches")


@pytest.fixture(scope="session")
def gateway_session(live_db_url: str, batch_files_dir: Path) -> Iterator[GatewayProcess]:
    process = start_gateway(live_db_url, name="gateway-batches", GP_BATCH_FILES_DIR=str(batch_files_dir),
                            **RUNNER_ENV)
    yield process
    process.stop()


@pytest.fixture(autouse=True)
def stored_files(batch_files_dir: Path, settings) -> Path:
    return empty_storage(batch_files_dir, settings)


@pytest.fixture
def start_runner(live_db_url: str, batch_files_dir: Path, transactional_db) -> Iterator[Callable[..., WorkerProcess]]:
    """Starts a worker that runs batches (settings over RUNNER_ENV's as keywords); as many as a
    test asks for, all stopped after it."""
    started: list[WorkerProcess] = []

    def start(**settings: str) -> WorkerProcess:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        env = gateway_env(live_db_url, GP_BATCH_FILES_DIR=str(batch_files_dir), **{**RUNNER_ENV, **settings})
        process = WorkerProcess(env, LOG_DIR / f"batch-worker-{free_port()}.log", queues="celery,batches")
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def runner(start_runner) -> WorkerProcess:
    return start_runner()
