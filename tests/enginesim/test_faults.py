"""Fault switches, at runtime (POST /sim/faults) and from the command line."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess
from tests.support.enginesim import chat_body, launch, stats


@pytest.fixture
def faulty() -> Iterator[EngineSimProcess]:
    with launch(2, "--speed", "10") as handle:
        yield handle


def test_health_fail_makes_health_answer_503(faulty: EngineSimProcess) -> None:
    assert faulty.set_faults(health_fail=True)["health_fail"] is True
    assert httpx.get(f"{faulty.url}/health").status_code == 503
    faulty.set_faults(health_fail=False)
    assert httpx.get(f"{faulty.url}/health").status_code == 200


def test_error_500_makes_completions_fail_in_openai_shape(faulty: EngineSimProcess) -> None:
    faulty.set_faults(error_500=True)
    response = httpx.post(f"{faulty.url}/v1/chat/completions", json=chat_body())
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == 500 and error["type"] == "InternalServerError" and error["message"]
    assert httpx.get(f"{faulty.url}/health").status_code == 200  # only completions fail
    faulty.set_faults(error_500=False)
    assert httpx.post(f"{faulty.url}/v1/chat/completions", json=chat_body()).status_code == 200


def test_a_marker_fails_only_the_requests_whose_body_contains_it(faulty: EngineSimProcess) -> None:
    assert faulty.set_faults(error_500_marker="POISON-7f3a")["error_500_marker"] == "POISON-7f3a"
    poisoned = httpx.post(f"{faulty.url}/v1/chat/completions", json=chat_body("say POISON-7f3a"))
    assert poisoned.status_code == 500
    assert poisoned.json()["error"]["type"] == "InternalServerError"
    assert httpx.post(f"{faulty.url}/v1/chat/completions", json=chat_body("say hello")).status_code == 200
    faulty.set_faults(error_500_marker="")
    assert httpx.post(f"{faulty.url}/v1/chat/completions",
                      json=chat_body("say POISON-7f3a")).status_code == 200


def test_stall_accepts_the_request_and_never_answers(faulty: EngineSimProcess) -> None:
    faulty.set_faults(stall=True)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{faulty.url}/v1/chat/completions", json=chat_body(stream=True),
                   timeout=httpx.Timeout(10, read=0.5))
    s = stats(faulty)
    assert s["running"] == 0 and s["waiting"] == 0  # nothing reached the engine
    faulty.set_faults(stall=False)
    assert httpx.post(f"{faulty.url}/v1/chat/completions", json=chat_body()).status_code == 200


def test_faults_can_be_set_from_the_command_line() -> None:
    with launch(2, "--fail-health", "--error-500") as sim:  # the helper accepts a 503 as "up"
        assert httpx.get(f"{sim.url}/health").status_code == 503
        assert httpx.post(f"{sim.url}/v1/completions",
                          json={"prompt": "x"}).status_code == 500
        assert httpx.get(f"{sim.url}/sim/faults").json() == {
            "health_fail": True, "error_500": True, "stall": False, "error_500_marker": ""}


def test_a_bad_faults_payload_is_a_400(faulty: EngineSimProcess) -> None:
    response = httpx.post(f"{faulty.url}/sim/faults", json={"stall": "yes"})
    assert response.status_code == 400
    assert httpx.post(f"{faulty.url}/sim/faults", json={"error_500_marker": 1}).status_code == 400
    assert stats(faulty)["faults"]["stall"] is False
