"""Saturation alerts: sustained queues and full KV caches open one alert; draining resolves it."""

import json

import pytest

from fairness.telemetry.saturation import Figures, SaturationDetector, Transition

POLL = 2.0


def feed(
    detector: SaturationDetector, start: float, seconds: float,
    waiting: float, running: float, kv_usage: float | None = 0.5,
) -> list[Transition]:
    """Poll every 2 s from `start` for `seconds` (end excluded) with steady figures."""
    transitions: list[Transition] = []
    t = start
    while t < start + seconds:
        transitions += detector.observe(t, waiting, running, kv_usage)
        t += POLL
    return transitions


def test_a_sustained_queue_opens_exactly_one_alert_after_the_window():
    detector = SaturationDetector()  # k = 4, 60 s

    # Five waiting for every running sequence, for ten minutes.
    transitions = feed(detector, 0, 600, waiting=40, running=8)

    assert transitions == [
        Transition("queue", "opened", at=60.0, started_at=0.0,
                   peak=Figures(waiting=40, running=8, ratio=5.0, kv_usage=0.5)),
    ]
    assert detector.is_open("queue")
    assert not detector.is_open("kv")


def test_the_opening_quotes_the_peak_of_the_run():
    detector = SaturationDetector()
    transitions = feed(detector, 0, 20, waiting=40, running=8)
    transitions += feed(detector, 20, 10, waiting=90, running=8)
    transitions += feed(detector, 30, 40, waiting=50, running=8)

    assert [(t.event, t.at, t.peak.waiting, t.peak.ratio) for t in transitions] == [
        ("opened", 60.0, 90, 11.25),
    ]


def test_draining_the_queue_resolves_the_alert_after_the_resolve_window():
    detector = SaturationDetector()  # resolves after 30 s clear
    feed(detector, 0, 300, waiting=40, running=8)
    feed(detector, 300, 20, waiting=200, running=8)

    transitions = feed(detector, 320, 120, waiting=2, running=8)

    assert transitions == [
        Transition("queue", "resolved", at=350.0, started_at=0.0,
                   peak=Figures(waiting=200, running=8, ratio=25.0, kv_usage=0.5)),
    ]
    assert not detector.is_open("queue")


def test_a_brief_dip_does_not_split_one_episode_into_two_alerts():
    detector = SaturationDetector()
    transitions = feed(detector, 0, 200, waiting=40, running=8)
    transitions += feed(detector, 200, 20, waiting=0, running=8)  # shorter than 30 s
    transitions += feed(detector, 220, 200, waiting=40, running=8)

    assert [t.event for t in transitions] == ["opened"]


def test_a_brief_spike_never_opens_an_alert():
    detector = SaturationDetector()
    transitions = feed(detector, 0, 100, waiting=4, running=8)
    transitions += feed(detector, 100, 50, waiting=100, running=8)  # 50 s < 60 s
    transitions += feed(detector, 150, 300, waiting=4, running=8)

    assert transitions == []


def test_one_poll_below_the_ratio_restarts_the_run():
    detector = SaturationDetector()
    transitions = feed(detector, 0, 50, waiting=40, running=8)
    transitions += detector.observe(50, waiting=31, running=8, kv_usage=0.5)  # ratio 3.9
    transitions += feed(detector, 52, 58, waiting=40, running=8)

    assert transitions == []
    assert feed(detector, 110, 4, waiting=40, running=8)[0].at == 112.0  # 52 + 60


def test_an_idle_engine_with_a_queue_counts_as_one_running_sequence():
    detector = SaturationDetector()

    transitions = feed(detector, 0, 62, waiting=4, running=0)

    assert [(t.kind, t.peak.ratio) for t in transitions] == [("queue", 4.0)]


def test_a_gap_in_the_polls_restarts_the_run():
    detector = SaturationDetector()  # a gap over 6 s breaks the run
    transitions = feed(detector, 0, 40, waiting=40, running=8)
    # The poller was down from 38 s to 58 s; 40 s of queue on each side, 100 s in all.
    transitions += feed(detector, 58, 40, waiting=40, running=8)

    assert transitions == []
    assert feed(detector, 98, 22, waiting=40, running=8)[0].at == 118.0  # 58 + 60


def test_a_gap_keeps_an_open_alert_open_until_polls_show_the_drain():
    detector = SaturationDetector()
    feed(detector, 0, 100, waiting=40, running=8)
    feed(detector, 100, 20, waiting=0, running=8)

    # 20 s clear, then 60 s unobserved, then 20 s clear: never 30 s observed clear in one run.
    assert feed(detector, 180, 20, waiting=0, running=8) == []
    assert [t.at for t in feed(detector, 200, 20, waiting=0, running=8)] == [210.0]


def test_a_full_kv_cache_opens_its_own_alert_after_its_window():
    detector = SaturationDetector()  # 0.95 for 120 s
    transitions = feed(detector, 0, 300, waiting=0, running=32, kv_usage=0.97)
    transitions += feed(detector, 300, 60, waiting=0, running=32, kv_usage=0.6)

    assert [(t.kind, t.event, t.at, t.peak.kv_usage) for t in transitions] == [
        ("kv", "opened", 120.0, 0.97),
        ("kv", "resolved", 330.0, 0.97),
    ]


def test_the_queue_and_kv_alerts_are_independent():
    detector = SaturationDetector()

    transitions = feed(detector, 0, 200, waiting=200, running=32, kv_usage=0.99)

    assert [(t.kind, t.at) for t in transitions] == [("queue", 60.0), ("kv", 120.0)]


def test_an_engine_without_a_kv_gauge_never_opens_a_kv_alert():
    detector = SaturationDetector()

    assert feed(detector, 0, 600, waiting=0, running=32, kv_usage=None) == []


def test_a_late_or_repeated_poll_is_ignored():
    detector = SaturationDetector()
    feed(detector, 0, 58, waiting=40, running=8)

    assert detector.observe(30, waiting=0, running=8, kv_usage=0.5) == []
    assert [t.at for t in detector.observe(60, waiting=40, running=8, kv_usage=0.5)] == [60.0]


def test_the_state_survives_a_json_round_trip_between_task_runs():
    uninterrupted = SaturationDetector(k=3.0)
    expected = feed(uninterrupted, 0, 150, waiting=40, running=8, kv_usage=0.99)
    expected += feed(uninterrupted, 150, 150, waiting=0, running=8, kv_usage=0.2)

    # Each poll in a fresh detector restored from the previous run's state, as the task does.
    transitions: list[Transition] = []
    state = SaturationDetector(k=3.0).to_state()
    for t in range(0, 300, 2):
        detector = SaturationDetector.from_state(json.loads(json.dumps(state)), k=3.0)
        busy = t < 150
        transitions += detector.observe(t, 40 if busy else 0, 8, 0.99 if busy else 0.2)
        state = detector.to_state()

    assert [t.event for t in expected] == ["opened", "opened", "resolved", "resolved"]
    assert transitions == expected


def test_an_open_alert_survives_the_round_trip():
    detector = SaturationDetector()
    feed(detector, 0, 100, waiting=40, running=8)

    restored = SaturationDetector.from_state(json.loads(json.dumps(detector.to_state())))

    assert restored.is_open("queue")
    assert restored.to_state() == detector.to_state()


@pytest.mark.parametrize("state", [{}, {"version": 99, "tracks": {}}, {"version": 1}, []])
def test_an_unreadable_state_is_refused(state):
    with pytest.raises(ValueError):
        SaturationDetector.from_state(state)


def test_a_queue_beside_free_slots_is_a_policy_backlog_and_opens_nothing():
    detector = SaturationDetector()
    t, transitions = 0.0, []
    while t < 600:  # 95 waiting for 5 running, for ten minutes, with the reserve's 3 slots idle
        transitions += detector.observe(t, 95, 5, 0.05, free_slots=3)
        t += POLL
    assert transitions == []
    assert not detector.is_open("queue")


def test_the_same_queue_with_every_slot_busy_opens_the_alert():
    detector = SaturationDetector()
    t, transitions = 0.0, []
    while t < 120:
        transitions += detector.observe(t, 95, 5, 0.05, free_slots=0)
        t += POLL
    assert [tr.event for tr in transitions] == ["opened"]


def test_slots_freeing_up_resolves_an_open_queue_alert():
    detector = SaturationDetector()
    for i in range(40):
        detector.observe(i * POLL, 40, 8, None, free_slots=0)
    assert detector.is_open("queue")
    resolved = [tr for i in range(40, 80) for tr in detector.observe(i * POLL, 40, 8, None, free_slots=2)]
    assert [tr.event for tr in resolved] == ["resolved"]
