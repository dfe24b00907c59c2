from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "metrics"


@pytest.fixture
def metrics_text():
    """Read a /metrics capture from tests/fixtures/metrics by file name."""
    return lambda name: (FIXTURES / name).read_text()
