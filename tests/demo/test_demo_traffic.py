"""The demo's traffic generator: bounded, and it really sends work through the gateway."""

from __future__ import annotations

import asyncio
import io

import pytest
from django.core.management import CommandError, call_command

from fairness.demo import traffic_generator
from tests.support.cast import MODEL


def test_the_command_sends_a_batch_job_through_the_gateway_and_stops(gateway, replica, cast):
    out = io.StringIO()
    call_command(
        "demo_traffic", "--url", gateway.url, "--model", MODEL, "--batch-key", cast["carol"].secret,
        "--batch-concurrency", "3", "--minutes", "0.05", stdout=out,
    )
    summary = out.getvalue().strip().splitlines()[-1]
    requests = int(summary.split("traffic: ")[1].split(" requests")[0])
    assert requests >= 1, out.getvalue()
    assert " 0 failed" in summary, out.getvalue()


def test_chatting_users_converse_and_are_counted(gateway, replica, cast):
    plan = traffic_generator.TrafficPlan(
        url=gateway.url, model=MODEL, interactive_keys=(cast["alice"].secret, cast["bob"].secret),
        chat_max_tokens=40, think_seconds=(0.0, 0.1), seed=1,
    )
    tally = asyncio.run(traffic_generator.run(plan, duration=2.0))
    assert tally.requests >= 4 and tally.tokens > 0
    assert tally.failed == 0 and tally.refused == 0


def test_it_refuses_to_run_without_keys(monkeypatch):
    monkeypatch.delenv("GP_TRAFFIC_KEYS", raising=False)
    monkeypatch.delenv("GP_TRAFFIC_BATCH_KEYS", raising=False)
    with pytest.raises(CommandError, match="at least one"):
        call_command("demo_traffic", "--url", "http://127.0.0.1:9")
