"""The real-engine tier: real vLLM (CPU build) servers with the tiny model made locally.

The tier never skips silently. Without the engine environment it fails with a message saying how
to build it; GP_SKIP_ENGINE=1 is the explicit opt-out for machines that cannot run vLLM.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engine.vllm_server import REPO_ROOT, SERVED_MODEL_NAME, VLLMServer, engine_python, start_all, stop_all
from tests.support.gateway_process import GatewayProcess
from tests.support.processes import LOG_DIR, start_gateway

MODEL_DIR = Path(os.environ.get("ENGINE_MODEL", REPO_ROOT / "var" / "tiny-model"))
# The same tiny model served as an embedding model: vLLM's pooling runner, converting the decoder.
EMBEDDING_MODEL_NAME = "tiny-embed"


TIMINGS: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter):
    if "startup" in TIMINGS:
        tier = TIMINGS.get("last_test", time.monotonic()) - TIMINGS["began"]
        terminalreporter.write_line(
            f"real-engine tier: three vLLM servers ready in {TIMINGS['startup']:.1f} s; "
            f"from their start to the tier's last test {tier:.1f} s"
        )



def pytest_runtest_logfinish(nodeid, location):
    if nodeid.startswith("tests/engine/"):
        TIMINGS["last_test"] = time.monotonic()


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.engine)


def _prepare_engine() -> None:
    python = engine_python()
    if not Path(python).exists():
        raise RuntimeError(
            f"The engine tier needs vLLM's CPU build at {python}. Build it with `make engine` "
            "(or scripts/engine-venv.sh), or set GP_SKIP_ENGINE=1 to skip this tier explicitly."
        )
    # Makes the tiny model, or does nothing when DIR already holds this recipe's model.
    subprocess.run([python, "-m", "tests.engine.make_model", str(MODEL_DIR)], cwd=REPO_ROOT, check=True)


@pytest.fixture(scope="session")
def vllm_servers() -> Iterator[tuple[VLLMServer, VLLMServer, VLLMServer]]:
    """Three real vLLM servers: `fcfs` and one using the priority policy, one per core, and an
    embedding server, idle unless a test embeds. They start together: on two slow cores the three
    were ready in 94 s where the pair alone took 53 s and the embedding server after it 56 more
    (each start is mostly three processes importing torch)."""
    if os.environ.get("GP_SKIP_ENGINE") == "1":
        print("\nGP_SKIP_ENGINE=1: the real-engine tier is SKIPPED")
        pytest.skip("GP_SKIP_ENGINE=1: real-engine tier skipped on request")
    _prepare_engine()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    # Eager: what the tier tests is vLLM's API, scheduler, caches and metrics, and on a fresh
    # machine torch.compile's warm-up of the tiny model alone took 35 s of the servers' 85.
    eager = ["--enforce-eager"]
    servers = (
        VLLMServer(MODEL_DIR, cpus="0", extra_args=eager, log_path=LOG_DIR / "vllm-fcfs.log"),
        VLLMServer(MODEL_DIR, cpus="1", scheduling_policy="priority", extra_args=eager,
                   log_path=LOG_DIR / "vllm-priority.log"),
        VLLMServer(MODEL_DIR, cpus="1", served_model_name=EMBEDDING_MODEL_NAME, enable_prefix_caching=False,
                   extra_args=[*eager, "--runner", "pooling", "--convert", "embed"],
                   log_path=LOG_DIR / "vllm-embed.log"),
    )
    started = TIMINGS["began"] = time.monotonic()
    start_all(list(servers))
    TIMINGS["startup"] = time.monotonic() - started
    yield servers
    stop_all(servers)
    TIMINGS["ended"] = time.monotonic()


@pytest.fixture(scope="session")
def vllm_pair(vllm_servers) -> tuple[VLLMServer, VLLMServer]:
    """The two chat servers: `fcfs` and priority."""
    return vllm_servers[0], vllm_servers[1]


@pytest.fixture(scope="session")
def vllm_embedder(vllm_servers) -> VLLMServer:
    """The tiny model served as an embedding model (vLLM's pooling runner)."""
    return vllm_servers[2]


@pytest.fixture
def gateway_over(live_db_url: str, redis_url: str, transactional_db) -> Iterator[Callable[..., GatewayProcess]]:
    """Start a gateway once the test's replicas exist: ``gateway_over(name=..., model=...,
    base_url=..., max_num_seqs=...)``. The session's gateway reads the config epoch at most once a
    second, so for that long it may still serve from an earlier test's replicas, and a test that
    counts slots on one engine cannot have a second engine's slots counted too."""
    started: list[GatewayProcess] = []

    def start(**replica: Any) -> GatewayProcess:
        from fairness.models import Replica

        Replica.objects.create(**replica)
        started.append(start_gateway(live_db_url, name=f"gateway-{replica['name']}"))
        return started[-1]

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def engine_replicas(vllm_pair, gateway):
    """Both servers registered as replicas of the model `tiny` for this test."""
    from fairness.models import Replica

    fcfs, priority = vllm_pair
    return (
        Replica.objects.create(name="vllm-fcfs", base_url=fcfs.base_url, model=SERVED_MODEL_NAME, max_num_seqs=8),
        Replica.objects.create(
            name="vllm-priority", base_url=priority.base_url, model=SERVED_MODEL_NAME, max_num_seqs=8,
            scheduling_policy=Replica.Policy.PRIORITY,
        ),
    )


@pytest.fixture
def engine_client(gateway, engine_replicas):
    from openai import OpenAI

    def make(member, **kwargs) -> OpenAI:
        return OpenAI(base_url=gateway.url + "/v1", api_key=member.secret, max_retries=0, timeout=120, **kwargs)

    return make
