"""The start helper used by tests and benchmarks."""

from __future__ import annotations

import httpx
import pytest

from enginesim.process import start_enginesim
from tests.support.processes import free_port


def test_it_starts_serves_and_stops_as_a_context_manager() -> None:
    port = free_port()
    with start_enginesim(port=port, model="tiny", max_num_seqs=3,
                         extra_args=["--speed", "10"]) as sim:
        assert sim.url == f"http://127.0.0.1:{port}" and sim.base_url == f"{sim.url}/v1"
        assert httpx.get(f"{sim.url}/v1/models").json()["data"][0]["id"] == "tiny"
        assert sim.stats()["max_num_seqs"] == 3
    assert not sim.alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.url}/health")


def test_kill_ends_it_at_once() -> None:
    sim = start_enginesim(max_num_seqs=1)
    sim.kill()
    assert not sim.alive() and sim.popen.returncode is not None


def test_it_reports_a_server_that_cannot_start() -> None:
    with pytest.raises(RuntimeError, match="--scheduling-policy"):
        start_enginesim(extra_args=["--scheduling-policy", "random"])
