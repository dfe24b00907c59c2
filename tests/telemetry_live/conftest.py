from __future__ import annotations

from collections.abc import Iterator

import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import Replica
from tests.support.cast import MODEL


@pytest.fixture
def engine(transactional_db, redis_url) -> Iterator[EngineSimProcess]:
    """A registered replica whose per-sequence step cost is large enough to shape the curve."""
    process = start_enginesim(model=MODEL, max_num_seqs=8,
                              extra_args=["--speed", "4", "--step-per-seq-ms", "2"])
    Replica.objects.create(name="sim-cap", base_url=process.url, model=MODEL, max_num_seqs=8)
    yield process
    process.stop()
