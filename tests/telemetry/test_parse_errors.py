"""Text that is not an engine's /metrics fails loudly with MetricsParseError."""

import pytest

from fairness.telemetry.metrics_parser import MetricsParseError, parse_metrics


@pytest.mark.parametrize(
    "text",
    [
        "<html><body><h1>502 Bad Gateway</h1></body></html>\n",
        '{"detail": "Not Found"}\n',
        'vllm:num_requests_running{engine="0",model_name="m" 3\n',
        "vllm:num_requests_running three\n",
        "# TYPE vllm:num_requests_running gauges\n",
    ],
    ids=["html", "json", "unclosed-labels", "word-value", "bad-type"],
)
def test_garbled_text_raises_a_parse_error(text):
    with pytest.raises(MetricsParseError, match="vllm metrics are not Prometheus text format"):
        parse_metrics(text, "vllm", taken_at=0.0)


def test_an_empty_body_has_no_load_gauges():
    with pytest.raises(MetricsParseError, match="no vllm:num_requests_running"):
        parse_metrics("", "vllm", taken_at=0.0)


def test_another_engines_metrics_are_rejected_for_the_configured_kind(metrics_text):
    with pytest.raises(MetricsParseError, match="in the vllm metrics"):
        parse_metrics(metrics_text("sglang-synthetic.txt"), "vllm", taken_at=0.0)


def test_the_error_is_a_value_error_for_callers_that_catch_broadly():
    assert issubclass(MetricsParseError, ValueError)
