"""Batches end to end: a gateway and a Celery worker that runs batches (with beat, on both queues),
sharing one batch-file directory, in front of the session's enginesim replica."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.batch_files.conftest import empty_storage
from tests.support.gateway_process import GatewayProcess
from tests.support.polling import wait_for
from tests.support.processes import LOG_DIR, free_port, gateway_env, start_gateway
from tests.support.worker_process import WorkerProcess

# Short, so a killed runner's batch is taken over quickly (its claim, and the engine slots its
# leases held, come free within seconds) and slices end within a test.
RUNNER_ENV = {"GP_BATCH_POLL_SECONDS": "0.5", "GP_BATCH_CLAIM_SECONDS": "3", "GP_BATCH_SLICE_SECONDS": "8",
              "GP_LEASE_TTL_SECONDS": "6", "GP_USAGE_FLUSH_SECONDS": "0.5", "GP_POLL_SECONDS": "1"}


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
def start_runner(live_db_url: str, batch_files_dir: Path, transactional_db) -> Iterator[Callable[[], WorkerProcess]]:
    """Starts a worker that runs batches; as many as a test asks for, all stopped after it."""
    started: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        env = gateway_env(live_db_url, GP_BATCH_FILES_DIR=str(batch_files_dir), **RUNNER_ENV)
        process = WorkerProcess(env, LOG_DIR / f"batch-worker-{free_port()}.log", queues="celery,batches")
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def runner(start_runner) -> WorkerProcess:
    return start_runner()


def chat_lines(count: int, model: str = "sim", max_tokens: int = 8, prefix: str = "req") -> bytes:
    return b"".join(
        json.dumps({"custom_id": f"{prefix}-{n}", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": model, "max_tokens": max_tokens,
                             "messages": [{"role": "user", "content": f"line {n}"}]}}).encode() + b"\n"
        for n in range(count)
    )


def wait_for_status(client, batch_id: str, statuses: set[str], timeout: float = 60.0):
    """The batch once its status is one of `statuses` (the SDK's retrieve, polled)."""
    def reached():
        batch = client.batches.retrieve(batch_id)
        return batch if batch.status in statuses else None

    return wait_for(reached, timeout=timeout, interval=0.2, what=f"batch {batch_id} to be {statuses}")


def output_lines(client, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).read().splitlines()]
