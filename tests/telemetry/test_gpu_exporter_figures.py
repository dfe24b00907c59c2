"""Reading NVIDIA's DCGM exporter: two GPUs become one replica's figures, and a value no GPU
could report is left out rather than shown."""

from __future__ import annotations

import pytest

from fairness.telemetry.gpu_metrics import MAX_GPUS, GpuFigures, parse_dcgm
from fairness.telemetry.metrics_parser import MetricsParseError
from tests.support.dcgm_exporter import EXPECTED, VALUES, payload


def with_values(gpu: int, **changes: float) -> list[dict[str, float]]:
    values = [dict(v) for v in VALUES]
    values[gpu].update({f"DCGM_FI_DEV_{k}": v for k, v in changes.items()})
    return values


def test_two_gpus_make_the_mean_utilisation_the_summed_memory_and_power_and_the_hottest():
    figures = parse_dcgm(payload())
    assert figures is not None and figures.as_json() == EXPECTED


def test_labels_written_with_spaces_as_older_exporters_do_are_read_too():
    text = ('# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0", UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"} 37\n')
    assert parse_dcgm(text) == GpuFigures(1, 37.0, None, None, None, None)


def test_gpus_without_a_uuid_are_told_apart_by_their_index():
    text = "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 100\nDCGM_FI_DEV_POWER_USAGE{gpu=\"1\"} 150\n"
    figures = parse_dcgm(text)
    assert figures is not None and (figures.gpus, figures.power_watts) == (2, 250.0)


@pytest.mark.parametrize("field, value", [
    ("GPU_UTIL", float("nan")), ("GPU_UTIL", -3), ("GPU_UTIL", 250), ("GPU_TEMP", 9223372036854775794),
    ("POWER_USAGE", float("inf")), ("POWER_USAGE", -1), ("FB_USED", 1e12),
])
def test_a_value_no_gpu_could_report_is_left_out(field, value):
    figures = parse_dcgm(payload(with_values(1, **{field: value})))
    assert figures is not None and figures.gpus == 2
    good = {"GPU_UTIL": ("utilization_percent", 82.0), "GPU_TEMP": ("temperature_c", 64.0),
            "POWER_USAGE": ("power_watts", None), "FB_USED": ("memory_used_mib", None)}[field]
    # The mean and the hottest come from the GPU that reported sensibly; a sum missing a GPU is no sum.
    assert figures.as_json()[good[0]] == good[1]


def test_an_answer_with_no_gpu_figure_gives_none_and_garbage_is_no_prometheus_text():
    assert parse_dcgm("# HELP up whatever\n# TYPE up gauge\nup 1\n") is None
    assert parse_dcgm("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} NaN\n") is None
    with pytest.raises(MetricsParseError):
        parse_dcgm("<html><body>dashboard</body></html>\n{{{")


def test_more_gpus_than_one_replica_could_have_is_not_believed():
    text = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}"}} 50\n' for i in range(MAX_GPUS + 1))
    assert parse_dcgm(text) is None


def test_figures_read_in_words_for_one_gpu_and_for_several():
    assert GpuFigures(1, 37.4, 40960.0, 81920.0, 250.2, 55.0).in_words() == \
        "1 GPU: 37% busy, 40.0 of 80.0 GiB, 250 W, 55 °C"
    assert GpuFigures(**EXPECTED).in_words() == "2 GPUs: 71% busy, 141 of 158 GiB, 600 W, hottest 71 °C"
