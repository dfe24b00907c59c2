"""Time to first token percentiles: nearest rank, in words people read."""

from fairness.telemetry.latency import ms_in_words, summarise


def test_percentiles_are_nearest_rank():
    s = summarise([400, 100, 300, 200, 5000])
    assert s is not None and (s.requests, s.p50_ms, s.p95_ms) == (5, 300, 5000)
    assert summarise([]) is None


def test_milliseconds_in_words():
    assert ms_in_words(None) == "–"
    assert ms_in_words(850) == "850 ms"
    assert ms_in_words(1234) == "1.2 s"
    assert ms_in_words(65_432) == "65 s"
