"""The test Redis databases: the one the test process and every process it starts share, and a
quiet one that no live process writes to. Under pytest-xdist each worker gets databases of its own.

`tests/conftest.py` points Django's settings at `TEST_REDIS_URL` before any test runs."""

from __future__ import annotations

import os

import pytest


def _neighbour_database(url: str) -> str:
    base, _, db = url.rpartition("/")
    number = int(db) if db.isdigit() else 0
    return f"{base}/{number - 1 if number > 0 else number + 1}"


def _for_this_worker(url: str) -> str:
    """Under pytest-xdist, worker gwN gets databases of its own: the number moved down by 2 * N
    (gw0 keeps the ones given, 15 and 14 by default; without xdist nothing changes). Tests flush
    their database."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit() or worker == "gw0":
        return url
    base, _, db = url.rpartition("/")
    number = (int(db) if db.isdigit() else 0) - 2 * int(worker[2:])
    if number < 0:
        raise pytest.UsageError(f"{worker}: no Redis database below 0 for it; under pytest-xdist give "
                                "GP_TEST_REDIS_URL and GP_TEST_QUIET_REDIS_URL high numbers (15 and 14, the defaults)")
    return f"{base}/{number}"


_REDIS_URL_GIVEN = os.environ.get("GP_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# The test process and every process it starts share this Redis database.
TEST_REDIS_URL = _for_this_worker(_REDIS_URL_GIVEN)

# For unit tests of shared, unprefixed keys (health verdicts, the probe lock, the load book):
# no live process writes here, so the session-long gateway's background loop cannot race them.
QUIET_REDIS_URL = _for_this_worker(os.environ.get("GP_TEST_QUIET_REDIS_URL", _neighbour_database(_REDIS_URL_GIVEN)))
