"""A queue held by a tier's own caps beside free slots is a policy backlog, shown as such with no
alert; a queue with every slot busy is saturation, and its alert names the waiting tiers and
follows the queue while it is open. Real gateway and engine processes and the real poll; the
alert window's time is injected."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import Replica, SaturationAlert
from fairness.telemetry import alerts
from tests.support.cast import MODEL
from tests.support.polling import wait_for
from tests.support.telemetry import poll, run
from tests.telemetry_live.senders import HeldRequests


@pytest.fixture
def slow_engine(gateway) -> Iterator[EngineSimProcess]:
    """Eight slots, slowed so that a request of 4,000 tokens (its context's most) outlasts the test."""
    process = start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "0.25"])
    Replica.objects.create(name="sim-slots", base_url=process.url, model=MODEL, max_num_seqs=8)
    yield process
    process.stop()


def capacity(gateway_url: str) -> dict:
    return httpx.get(gateway_url + "/api/capacity", timeout=10).json()


def two_minutes_of_polls(start: float) -> float:
    """Feed the alerts a real poll's figures every (injected) 2 s for two minutes."""
    now = poll()
    t = start
    while t < start + 120:
        run(alerts.observe, now.readings, now.gateway_queued, t)
        t += 2
    return t


def tiers(body: dict) -> dict[str, dict]:
    return {t["name"]: t for t in body["tiers"]}


def test_a_batch_backlog_beside_free_slots_is_no_alert_and_a_full_card_is(gateway, cast, slow_engine):
    held: list[HeldRequests] = []
    try:
        # carol's batch key: two in its pool, then borrowing until the reserve's three slots are
        # left; the rest waits behind the pool cap.
        held.append(HeldRequests(gateway.url, cast["carol"], 30))
        wait_for(lambda: capacity(gateway.url)["totals"]["waiting_gateway"] == 25, timeout=30,
                 what=f"carol's first 30 requests: 25 waiting ({held[0].failures[:1]})")
        # Queued behind the first 30 (one key's requests start in order): these ten never run.
        held.append(HeldRequests(gateway.url, cast["carol"], 10))
        backlog = wait_for(
            lambda: (b := capacity(gateway.url))["totals"]["queue_status"] == "backlog"
            and b["totals"]["waiting_gateway"] == 35 and slow_engine.stats()["running"] == 5 and b,
            timeout=30, what=f"carol's 40 requests: 5 running, 35 waiting ({held[0].failures[:1]})",
        )
        assert backlog["totals"]["free_slots"] == 3
        assert re.search(r"not for a full card \(3 slots free\): batch: 35 requests from 1 person\.",
                         backlog["totals"]["queue_note"])
        assert tiers(backlog)["batch"]["waiting"] == 35 and tiers(backlog)["batch"]["waiting_keys"] == 1
        assert tiers(backlog)["interactive"]["expected_wait"] == "none"
        assert tiers(backlog)["batch"]["expected_wait"] != "none"

        t = two_minutes_of_polls(1000.0)
        assert not SaturationAlert.objects.exists()
        assert capacity(gateway.url)["alerts"] == []

        # alice and bob take the three free slots and one more waits: every slot is busy.
        held.append(HeldRequests(gateway.url, cast["alice"], 2))
        held.append(HeldRequests(gateway.url, cast["bob"], 2))
        wait_for(lambda: capacity(gateway.url)["totals"]["queue_status"] == "full"
                 and slow_engine.stats()["running"] == 8, timeout=30, what="a full card")
        t = two_minutes_of_polls(t)
        alert = SaturationAlert.objects.get()
        assert (alert.kind, alert.resolved_at) == ("queue", None)
        summary = capacity(gateway.url)["alerts"][0]["summary"]
        assert summary.startswith("36 requests waiting for 8 running")
        assert "Waiting by tier: batch 35, interactive 1." in summary
        assert "gp-" not in summary  # the public page names tiers, never keys
        assert alert.figures["now"]["waiting_people"]  # the staff pages can name them
        assert "carol" not in summary  # ... and the public page never does

        # Ten of carol's requests give up: the open alert's figures follow.
        held.pop(1).stop()
        wait_for(lambda: capacity(gateway.url)["totals"]["waiting_gateway"] == 26, timeout=30,
                 what="ten fewer waiting")
        now = poll()
        run(alerts.observe, now.readings, now.gateway_queued, t)
        alert.refresh_from_db()
        assert alert.resolved_at is None and alert.figures["now"]["waiting"] == 26
        summary = capacity(gateway.url)["alerts"][0]["summary"]
        assert summary.startswith("26 requests waiting for 8 running")
        assert "At its worst 36 requests waited." in summary
    finally:
        for h in held:
            h.stop()
