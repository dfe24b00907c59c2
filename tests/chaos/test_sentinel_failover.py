"""A failover under load: Redis behind three sentinels, the master SIGKILLed while two gateways
and a Celery worker (its broker through kombu's sentinel transport) serve the load. The sentinels
promote the replica; the same judge as the chaos run holds (no 500, no cap exceeded beyond the
allowance, every completed request's usage recorded), and service is back within the failover
time plus 2 s: a replica promoted is handled as a Redis restarted (restart hold, lease retake,
usage pushed again)."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from tests.chaos import run as chaos_run
from tests.chaos import scenario as kinds
from tests.chaos.ground_truth import as_json, judge, render
from tests.chaos.scenario import Fault, Scenario, seed_from_env
from tests.chaos.sentinel import SentinelWorld
from tests.support.processes import LOG_DIR

pytestmark = pytest.mark.chaos

KILL_AT = 12.0  # seconds into the load


def test_service_caps_and_usage_hold_through_a_sentinel_failover(live_db_url, tiers, capsys, monkeypatch):
    def say(line: str) -> None:
        with capsys.disabled():
            print(line)

    scenario = Scenario(seed=seed_from_env(), requests=150, duration=30.0,
                        faults=(Fault(KILL_AT, kinds.REDIS_KILL, 0, 0.0),))
    monkeypatch.setattr(chaos_run, "World", SentinelWorld)
    evidence = chaos_run.run(scenario, database_url=live_db_url, secret_key=settings.SECRET_KEY, log_dir=LOG_DIR,
                             say=say)
    report = judge(scenario, evidence)
    (window,) = evidence.windows
    failover = window.ready - window.start  # from the kill until the sentinels name the new master
    back = [o.headers_at for o in evidence.outcomes
            if o.status == 200 and o.headers_at is not None and o.sent_at >= window.start]
    first_200 = min(back) - window.start if back else None
    report.figures["failover: kill until the sentinels name the new master (s)"] = failover
    report.figures["failover: kill until the first 200 after it (s)"] = first_200
    say(render(report))
    (LOG_DIR / f"sentinel-failover-{scenario.seed}.json").write_text(json.dumps(as_json(report), indent=1))
    assert not report.failures, f"seed {scenario.seed} (GP_CHAOS_SEED={scenario.seed}):\n" + render(report)
    assert first_200 is not None and first_200 <= failover + scenario.recovery_limit, render(report)
    assert report.figures["HTTP 500"] == 0
