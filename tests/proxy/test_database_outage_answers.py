"""What the gateway answers while the database is away, in process: a key it has read keeps
answering from its cache, one it has not gets an OpenAI-shaped 503 `database_unavailable` with
Retry-After, and the failures make one log line, without a traceback, for many.
(tests/chaos/test_database_outage.py stops a real PostgreSQL under load.)"""

from __future__ import annotations

import logging

import pytest
from django.db.utils import InterfaceError, OperationalError

from fairness.gateway.api_keys import KeyCache, KeyInfo
from fairness.gateway.database_outage import OutageLog
from fairness.gateway.errors import ApiError
from fairness.gateway.tier_policy import TierPolicy
from fairness.models import Tier

KNOWN = "gp-" + "k" * 43
UNSEEN = "gp-" + "u" * 43
ROW = KeyInfo(id=1, prefix=KNOWN[:11], owner_id=1, tier=TierPolicy.of(Tier(name="interactive")), expires_at=None,
              revoked=False, owner_active=True)


class Database:
    """The key's row, until the database goes away."""

    def __init__(self) -> None:
        self.away: Exception | None = None

    async def __call__(self, secret_hash: str) -> KeyInfo:
        if self.away is not None:
            raise self.away
        return ROW


@pytest.mark.parametrize("error", [OperationalError("connection refused"), InterfaceError("connection already closed")])
async def test_a_key_read_before_the_outage_answers_and_an_unseen_one_gets_503_saying_why(error):
    database = Database()
    cache = KeyCache(ttl=60.0, clock=lambda: 0.0, loader=database)
    await cache.authenticate(f"Bearer {KNOWN}")
    database.away = error

    assert (await cache.authenticate(f"Bearer {KNOWN}")).id == ROW.id
    with pytest.raises(ApiError) as caught:
        await cache.authenticate(f"Bearer {UNSEEN}")
    response = caught.value.response()
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    body = caught.value.body()["error"]
    assert (body["type"], body["code"]) == ("service_unavailable", "database_unavailable")
    assert "database is unavailable" in body["message"] and "API key" in body["message"]

    database.away = None  # back: the failure was not kept, the key is read now
    assert (await cache.authenticate(f"Bearer {UNSEEN}")).id == ROW.id


def test_an_outage_is_one_warning_without_a_traceback_for_many_failures(caplog):
    clock = [0.0]
    outage = OutageLog(every=10.0, clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="fairness.gateway.database_outage"):
        for _ in range(5):
            outage.report(OperationalError("connection failed: refused\n\tIs the server running?"), "a key lookup")
            clock[0] += 1.0
        clock[0] = 10.5
        outage.report(OperationalError("connection failed: refused"), "a key lookup")

    lines = [record for record in caplog.records if record.name == "fairness.gateway.database_outage"]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING]
    assert all(r.exc_info is None for r in lines)
    assert "OperationalError in a key lookup: connection failed: refused)" in lines[0].getMessage()
    assert "Is the server running" not in lines[0].getMessage()  # the first line of the driver's message
    assert "; 4 more failure(s) since the last report" in lines[1].getMessage()
