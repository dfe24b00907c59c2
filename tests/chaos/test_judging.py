"""The chaos run's judge on made-up evidence: what counts as over a cap, and which answers a fault
excuses (no processes: this runs with the fast suite, the run itself is marked `chaos`)."""

from __future__ import annotations

from tests.chaos import scenario as kinds
from tests.chaos.clients import Outcome
from tests.chaos.ground_truth import judge, over_cap
from tests.chaos.run import Evidence, Window
from tests.chaos.scenario import Scenario


def test_over_cap_finds_each_stretch_with_its_peak():
    assert over_cap([(0, 2), (1, 3), (1.5, 2.5)], cap=2) == [(1.5, 2, 3)]
    assert over_cap([(0, 4), (1, 3), (1.5, 2.5), (5, 6), (5, 7), (5.5, 6.5)], cap=2) == [(1.5, 2.5, 3), (5.5, 6, 3)]


def test_a_request_arriving_as_another_ends_does_not_overlap_it():
    assert over_cap([(0, 1), (1, 2)], cap=1) == []


def evidence_with(*outcomes: Outcome, windows: tuple[Window, ...] = ()) -> Evidence:
    evidence = Evidence(started=0.0, outcomes=list(outcomes), windows=list(windows), load_ended=10.0,
                        fill_full_at=10.5)
    evidence.engine_logs = {"chaos-0": [], "chaos-1": []}
    return evidence


def answer(sent_at: float, status: int | None, code: str = "", **fields) -> Outcome:
    return Outcome(index=0, kind="load", key="i0", gateway=0, sdk=False, stream=False, sent_at=sent_at,
                   ended_at=sent_at + 0.1, status=status, code=code, **fields)


def test_a_503_is_excused_only_while_redis_is_away_and_two_seconds_after():
    scenario = Scenario(seed=1)
    redis = Window(kinds.REDIS_KILL, 0, start=5.0, ready=6.0)
    served = answer(6.2, 200, completed=True, headers_at=6.25)
    during = judge(scenario, evidence_with(answer(5.5, 503, "store_unavailable"), served, windows=(redis,)))
    assert during.failures == []
    assert during.figures["worst recovery after Redis returns (s)"] == 0.25
    late = judge(scenario, evidence_with(answer(8.5, 503, "store_unavailable"), served, windows=(redis,)))
    assert any("outside any fault window" in failure for failure in late.failures)
    assert any("after Redis answered" in failure for failure in late.failures)


def test_a_500_is_never_excused():
    scenario = Scenario(seed=1)
    replica = Window(kinds.REPLICA_KILL, 0, start=5.0, ready=6.0)
    report = judge(scenario, evidence_with(answer(5.5, 500), windows=(replica,)))
    assert report.figures["HTTP 500"] == 1
    assert any("500" in failure for failure in report.failures)


def test_a_dead_gateway_excuses_only_its_own_calls():
    scenario = Scenario(seed=1)
    gateway = Window(kinds.GATEWAY_KILL, 1, start=5.0, ready=6.0)
    own = answer(5.5, None, error="ConnectError")
    own.gateway = 1
    other = answer(5.5, None, error="ConnectError")
    report = judge(scenario, evidence_with(own, other, windows=(gateway,)))
    assert report.figures["failed calls excused by gateway SIGKILL"] == 1
    assert [f for f in report.failures if "no answer" in f] == [f for f in report.failures if f.startswith("1 × ")]
    assert len(report.failures) == 1
