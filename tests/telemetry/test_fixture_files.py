"""Every capture in tests/fixtures/metrics parses as the engine its file name says.

Files are named `<kind>-<anything>.txt`; a real capture dropped in the folder is checked
the moment it lands, with no change here.
"""

from dataclasses import fields, replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fairness.telemetry.engine_kinds import ENGINES
from fairness.telemetry.metrics_parser import Snapshot, parse_metrics, rates_between
from tests.support.captures import FIXTURES

CAPTURES = sorted(FIXTURES.glob("*.txt"))

# Every vLLM with the V1 engine exports these, whatever it names them.
VLLM_CORE = (
    "kv_usage", "prefix_cache_queries", "prefix_cache_hits", "prompt_tokens",
    "generation_tokens", "requests_success", "block_size", "num_gpu_blocks",
)
# EngineMetrics fields whose Snapshot field is named differently.
SNAPSHOT_FIELD = {"cache_config_info": "block_size", "waiting_by_reason": "waiting_capacity"}


def kind_of(path: Path) -> str:
    kind = path.name.split("-", 1)[0]
    assert kind in ENGINES, (
        f"{path.name}: name captures <kind>-<anything>.txt with kind one of {sorted(ENGINES)}"
    )
    return kind


def sample_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(params=CAPTURES, ids=[p.name for p in CAPTURES])
def capture(request) -> tuple[str, str]:
    path: Path = request.param
    return kind_of(path), path.read_text()


def test_every_named_series_in_the_capture_reaches_the_snapshot(capture):
    kind, text = capture
    snap = parse_metrics(text, kind, taken_at=0.0)
    present = sample_names(text)

    for field in fields(ENGINES[kind]):
        names = getattr(ENGINES[kind], field.name)
        if field.name == "waiting_by_reason" and 'reason="capacity"' not in text:
            continue
        if any(n in present or f"{n}_total" in present for n in names):
            target = SNAPSHOT_FIELD.get(field.name, field.name)
            assert getattr(snap, target) is not None, f"{target} not read from {names}"


def test_the_capture_holds_plausible_values(capture):
    kind, text = capture
    snap = parse_metrics(text, kind, taken_at=0.0)

    assert snap.running >= 0 and snap.waiting >= 0
    if snap.kv_usage is not None:
        assert 0.0 <= snap.kv_usage <= 1.0
    if snap.prefix_cache_hits is not None and snap.prefix_cache_queries is not None:
        assert 0 <= snap.prefix_cache_hits <= snap.prefix_cache_queries
    if snap.block_size is not None and snap.num_gpu_blocks is not None:
        assert snap.kv_capacity_tokens == snap.block_size * snap.num_gpu_blocks
    if kind == "vllm":
        missing = [name for name in VLLM_CORE if getattr(snap, name) is None]
        assert not missing, f"vLLM fields not found: {missing}"


def test_the_capture_filtered_by_its_own_model_is_unchanged(capture):
    kind, text = capture
    models = {
        s.labels["model_name"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if "model_name" in s.labels
    }
    assert len(models) <= 1, f"a replica serves one model, the capture names {models}"
    # Series without a model_name label are kept whatever the filter names.
    model = models.pop() if models else "any-model"

    filtered = parse_metrics(text, kind, taken_at=0.0, model=model)

    assert filtered == parse_metrics(text, kind, taken_at=0.0)


def test_two_identical_captures_show_no_throughput(capture):
    kind, text = capture
    first = parse_metrics(text, kind, taken_at=10.0)
    second: Snapshot = replace(first, taken_at=12.0)

    rates = rates_between(first, second)

    for rate in (rates.generation_tokens_per_s, rates.prompt_tokens_per_s):
        assert rate in (None, 0.0)
    assert rates.prefix_cache_hit_rate is None
