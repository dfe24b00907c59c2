from collections.abc import Iterator

import pytest
from openai import OpenAI

from enginesim.process import EngineSimProcess, start_enginesim
from tests.conftest import Member

MODEL = "sim"


@pytest.fixture(scope="session")
def sim() -> Iterator[EngineSimProcess]:
    """One fast simulated engine shared by the proxy tests (its faults reset per test)."""
    process = start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "20"])
    yield process
    process.stop()


@pytest.fixture
def replica(sim: EngineSimProcess, gateway):
    from fairness.models import Replica

    sim.set_faults(health_fail=False, error_500=False, stall=False)
    return Replica.objects.create(name="sim-a", base_url=sim.url, model=MODEL, max_num_seqs=8)


@pytest.fixture
def openai_for(gateway, replica):
    def make(member: Member, **kwargs) -> OpenAI:
        return OpenAI(base_url=gateway.url + "/v1", api_key=member.secret, max_retries=0, **kwargs)

    return make
