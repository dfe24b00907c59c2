"""The queue told apart: a full card, or a backlog held by a tier's own caps; and the wait a new
request of each tier should expect now."""

from __future__ import annotations

from fairness.scheduling.live_counts import Stats
from fairness.telemetry import queue_state
from fairness.telemetry.queue_state import TierQueue, TierRule

INTERACTIVE = TierRule("interactive", None, False, 600.0)
BATCH = TierRule("batch", 2, True, 0.0)
HEADS = {"interactive": 600.0, "batch": 0.0}


def stats(**replicas: tuple[int, int]) -> Stats:
    return {
        "groups": {}, "longest_wait": 0.0,
        "tiers": {
            "batch": {"in_flight": 13, "borrowed": 11, "queued": 95, "longest_wait": 30.0},
            "interactive": {"in_flight": 2, "borrowed": 0, "queued": 0, "longest_wait": 0.0},
        },
        "keys": {"p7.batch": {"in_flight": 13, "queued": 95}, "p8.interactive": {"in_flight": 2, "queued": 0}},
        "replicas": {name: {"capacity": cap, "in_flight": busy} for name, (cap, busy) in replicas.items()},
    }


def test_free_slots_count_only_the_named_replicas_and_a_down_one_offers_none():
    s = stats(a=(16, 13), b=(0, 0), other=(8, 0))
    assert queue_state.free_slots(s, ["a", "b"]) == 3
    assert queue_state.free_slots(s, ["unknown"]) is None


def test_tier_queues_count_the_people_waiting_per_tier():
    queues = queue_state.tier_queues(stats(a=(16, 13)))
    assert queues["batch"] == TierQueue("batch", 95, 1, 13, 11)
    assert queues["interactive"].keys == 0


def test_waiting_beside_free_slots_is_a_backlog_and_with_none_free_the_card_is_full():
    assert queue_state.status(95, 3) == "backlog"
    assert queue_state.status(95, 0) == "full"
    assert queue_state.status(95, None) == "full"
    assert queue_state.status(0, 0) == "none"


def test_interactive_starts_at_once_beside_a_batch_backlog_and_batch_waits_its_pools_turn():
    queues = queue_state.tier_queues(stats(a=(16, 13)))
    now_interactive = queue_state.expected_wait(INTERACTIVE, queues, HEADS, 3, 3, 0.5)
    # 95 ahead in the pool, its two slots coming back at one request every two seconds.
    now_batch = queue_state.expected_wait(BATCH, queues, HEADS, 3, 3, 0.5)
    assert now_interactive == 0
    assert now_batch == 192.0
    assert queue_state.wait_in_words(now_interactive) == "none"
    assert queue_state.wait_in_words(now_batch) == "about 3 min"


def test_batch_borrows_at_once_when_slots_beyond_the_reserve_are_idle_and_nobody_waits():
    s = stats(a=(16, 4))
    s["tiers"]["batch"].update(in_flight=4, borrowed=2, queued=0)
    queues = queue_state.tier_queues(s)
    assert queue_state.expected_wait(BATCH, queues, HEADS, 12, 3, 0.1) == 0


def test_on_a_full_card_everyone_with_at_least_the_same_head_start_goes_first():
    s = stats(a=(16, 16))
    s["tiers"]["interactive"]["queued"] = 9
    queues = queue_state.tier_queues(s)
    # interactive: only the 9 interactive requests are ahead; batch: all 104.
    assert queue_state.expected_wait(INTERACTIVE, queues, HEADS, 0, 3, 2.0) == 5.0
    assert queue_state.expected_wait(BATCH, queues, HEADS, 0, 3, 2.0) == 52.5


def test_a_wait_that_cannot_be_timed_is_unknown():
    queues = queue_state.tier_queues(stats(a=(16, 13)))
    assert queue_state.expected_wait(BATCH, queues, HEADS, 3, 3, None) is None
    assert queue_state.expected_wait(BATCH, queues, HEADS, None, 3, 1.0) is None
    assert queue_state.wait_in_words(None) == "unknown"
    assert queue_state.wait_in_words(4) == "a few seconds"
    assert queue_state.wait_in_words(33) == "about 30 s"
    assert queue_state.wait_in_words(7200) == "about 2 h"
