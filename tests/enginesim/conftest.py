"""A real enginesim server shared by a module's tests, and an HTTP client."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess
from tests.support.enginesim import launch


@pytest.fixture(scope="module")
def sim() -> Iterator[EngineSimProcess]:
    """A fast shared server (ten times real speed) for behaviour that does not depend on timing."""
    with launch(8, "--speed", "10") as handle:
        yield handle


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30) as c:
        yield c
