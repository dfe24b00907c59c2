import pytest

from tests.support.captures import FIXTURES


@pytest.fixture
def metrics_text():
    """Read a /metrics capture from tests/fixtures/metrics by file name."""
    return lambda name: (FIXTURES / name).read_text()
