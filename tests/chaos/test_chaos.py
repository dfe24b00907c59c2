"""The chaos run: two gateways, two replicas, a private Redis and a Celery worker, real
clients (the openai SDK and raw HTTP) abandoning at random, and on schedule a gateway SIGKILLed,
a replica SIGKILLed, Redis stopped with SIGKILL and with SIGTERM, and Redis restarted empty under
long streams; every process is started again. The seed is printed (GP_CHAOS_SEED repeats it);
bench/chaos.py runs the same scenario ten thousand requests long."""

from __future__ import annotations

import json

import pytest
from django.conf import settings

from tests.chaos.ground_truth import as_json, judge, render
from tests.chaos.run import run
from tests.chaos.scenario import Scenario
from tests.support.processes import LOG_DIR

pytestmark = pytest.mark.chaos


def test_caps_usage_and_recovery_hold_through_crashes_and_redis_restarts(live_db_url, tiers, capsys):
    def say(line: str) -> None:
        with capsys.disabled():  # the seed and the figures, passing or failing
            print(line)

    scenario = Scenario.build()
    evidence = run(scenario, database_url=live_db_url, secret_key=settings.SECRET_KEY, log_dir=LOG_DIR, say=say)
    report = judge(scenario, evidence)
    say(render(report))
    (LOG_DIR / f"chaos-{scenario.seed}.json").write_text(json.dumps(as_json(report), indent=1))
    assert not report.failures, f"seed {scenario.seed} (GP_CHAOS_SEED={scenario.seed}):\n" + render(report)
