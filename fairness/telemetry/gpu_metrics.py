"""The GPU under a replica, read from NVIDIA's DCGM exporter: utilisation, framebuffer memory,
power and temperature, one `GpuFigures` per poll for the whole replica.

The metric names and units are those of dcgm-exporter's default counters
(etc/default-counters.csv): DCGM_FI_DEV_GPU_UTIL (%), DCGM_FI_DEV_FB_USED and _FB_FREE (MiB),
DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_GPU_TEMP (°C). A replica on several GPUs (tensor
parallel) is one figure each: the mean utilisation, memory and power summed, the hottest GPU's
temperature, and how many GPUs that covers.

The exporter's answer is treated as hostile, as an engine's is: its size is capped, the whole
exchange has a deadline, and a value no GPU could report (NaN, negative, DCGM's "blank"
sentinels near 2^63) is left out. An answer with nothing usable gives None: no GPU figures,
never zeros, and never a reason that quotes it.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings

from fairness.gateway import engine_client
from fairness.models import EngineSample
from fairness.telemetry.metrics_parser import MetricsParseError, Series, series_by_name

log = logging.getLogger(__name__)

# A busy 8-GPU exporter with every profiling counter on answers in well under this.
MAX_BYTES = 2 * 1024 * 1024
# A replica with more GPUs than this is an exporter counting something else.
MAX_GPUS = 64

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"  # not a default counter; counted in the total when exported
POWER = "DCGM_FI_DEV_POWER_USAGE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"

# The largest value each can sensibly take on one GPU; beyond it the reading is dropped.
BOUNDS = {
    UTIL: 100.0,
    FB_USED: 4 * 1024 * 1024.0,  # 4 TiB in MiB
    FB_FREE: 4 * 1024 * 1024.0,
    FB_RESERVED: 4 * 1024 * 1024.0,
    POWER: 5000.0,
    TEMP: 150.0,
}


@dataclass(frozen=True)
class GpuFigures:
    """One replica's GPUs at one poll; a None figure: no GPU of it reported that one."""

    gpus: int
    utilization_percent: float | None  # the mean over its GPUs
    memory_used_mib: float | None  # summed over its GPUs
    memory_total_mib: float | None  # used + free (+ reserved), summed
    power_watts: float | None  # summed
    temperature_c: float | None  # the hottest GPU's

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any] | None) -> GpuFigures | None:
        if not raw or not raw.get("gpus"):
            return None
        return cls(int(raw["gpus"]), raw.get("utilization_percent"), raw.get("memory_used_mib"),
                   raw.get("memory_total_mib"), raw.get("power_watts"), raw.get("temperature_c"))

    def sample_fields(self) -> dict[str, float | int | None]:
        """The EngineSample columns."""
        return {"gpu_count": self.gpus, "gpu_util": self.utilization_percent,
                "gpu_mem_used_mib": self.memory_used_mib, "gpu_mem_total_mib": self.memory_total_mib,
                "gpu_power_w": self.power_watts, "gpu_temp_c": self.temperature_c}

    @classmethod
    def from_sample(cls, sample: EngineSample) -> GpuFigures | None:
        """A stored EngineSample's figures (what a disabled replica last showed), or None."""
        if not sample.gpu_count:
            return None
        return cls(round(sample.gpu_count), sample.gpu_util, sample.gpu_mem_used_mib, sample.gpu_mem_total_mib,
                   sample.gpu_power_w, sample.gpu_temp_c)

    def in_words(self) -> str:
        """"2 GPUs: 71% busy, 61.2 of 80 GiB, 540 W, hottest 68 °C" (the staff replica list)."""
        said = []
        if self.utilization_percent is not None:
            said.append(f"{self.utilization_percent:.0f}% busy")
        if self.memory_used_mib is not None:
            said.append(f"{gib(self.memory_used_mib, unit=False)} of {gib(self.memory_total_mib)}"
                        if self.memory_total_mib else f"{gib(self.memory_used_mib)} used")
        if self.power_watts is not None:
            said.append(f"{self.power_watts:,.0f} W")
        if self.temperature_c is not None:
            said.append(f"{'hottest ' if self.gpus > 1 else ''}{self.temperature_c:.0f} °C")
        return f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}: {', '.join(said)}"


def gib(mib: float | None, unit: bool = True) -> str:
    """Framebuffer MiB as GiB: one decimal below 100 GiB, as static/js/capacity.js prints it."""
    if mib is None:
        return "–"
    value = mib / 1024
    figure = f"{value:.1f}" if value < 100 else f"{value:,.0f}"
    return f"{figure} GiB" if unit else figure


def parse_dcgm(text: str) -> GpuFigures | None:
    """The replica's GPUs from one exporter answer; None when it holds no usable GPU figure.
    GPUs are told apart by UUID (the `gpu` index where there is none): a series per GPU."""
    index = series_by_name(text, "DCGM exporter")
    per_gpu: dict[str, dict[str, float]] = defaultdict(dict)
    for name, bound in BOUNDS.items():
        for gpu, value in _per_gpu(index.get(name, []), bound).items():
            per_gpu[gpu][name] = value
    if not per_gpu or len(per_gpu) > MAX_GPUS:
        return None
    gpus = list(per_gpu.values())
    totals = [g[FB_USED] + g[FB_FREE] + g.get(FB_RESERVED, 0.0) for g in gpus if FB_USED in g and FB_FREE in g]
    return GpuFigures(
        gpus=len(gpus),
        utilization_percent=_mean([g[UTIL] for g in gpus if UTIL in g]),
        # A sum is only a sum when every GPU gave its part.
        memory_used_mib=_whole_sum([g.get(FB_USED) for g in gpus]),
        memory_total_mib=math.fsum(totals) if len(totals) == len(gpus) else None,
        power_watts=_whole_sum([g.get(POWER) for g in gpus]),
        temperature_c=max((g[TEMP] for g in gpus if TEMP in g), default=None),
    )


def _per_gpu(series: Series, bound: float) -> dict[str, float]:
    found: dict[str, float] = {}
    for labels, value in series:
        gpu = labels.get("UUID") or labels.get("gpu")
        if gpu is None or not math.isfinite(value) or not 0 <= value <= bound:
            continue
        found[gpu] = value
    return found


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _whole_sum(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else math.fsum(v for v in values if v is not None)


async def scrape(url: str) -> GpuFigures | None:
    """The exporter's figures, or None for any failure: a GPU that cannot be read leaves the
    engine's own poll as it was (the replica is not down for it)."""
    if not url:
        return None
    try:
        status, body = await engine_client.get_url_capped(url, settings.GP_POLL_TIMEOUT_SECONDS, MAX_BYTES)
        if status != 200:
            log.info("GPU exporter %s answered HTTP %s", url, status)
            return None
        return parse_dcgm(body.decode("utf-8", errors="replace"))
    except MetricsParseError:
        log.info("GPU exporter %s answered with no Prometheus text", url)
    except Exception as exc:  # unreachable, too slow, too large, anything odd: no figures
        log.info("GPU exporter %s could not be read (%s)", url, type(exc).__name__)
    return None
