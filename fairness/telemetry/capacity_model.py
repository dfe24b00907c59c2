"""The capacity model: what a model's replicas sustain in total, and what each user gets.

Continuous batching advances every running sequence by one token per decode step, and a step over
n sequences takes about `a + c·n` seconds: a fixed cost (reading the weights) plus a per-sequence
cost (attention over its KV cache). So the card yields g(n) = n / (a + c·n) tokens per second in
total and 1 / (a + c·n) to each sequence. Fitting a and c to the (running, tok/s) samples the poller
records gives the figures people schedule around.

The curve is fitted to each replica's own samples (one replica's step time), so a replica that
is down, draining or new changes which replicas count, never what was learnt: the figures
published for R replicas serving now are the same curve with c divided by R (the router spreads
the load evenly), and `slots` the sum of their `max_num_seqs` (`for_replicas`).

No Django imports, so the Celery task and the tests call it directly.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from fairness.telemetry.metrics_parser import Snapshot, rates_between

# The concurrencies the capacity page tabulates.
USER_COUNTS = (1, 2, 4, 8, 16, 32)
DEFAULT_USERS = 8
# Below this many busy samples (20 s of traffic at the 2 s poll) a fit is mostly noise.
MIN_SAMPLES = 10
# c / a of a reference calibration (vLLM serving an 8B model on one GPU: a ≈ 9.8 ms, c ≈ 0.19 ms). One observed load, or
# a few close together, cannot separate the two costs, so that split stands in for the shape.
SEED_STEP_RATIO = 0.19 / 9.8
# The least relative noise the outlier cut assumes, so exact data keeps all of its samples.
_MIN_NOISE = 0.01
# The curve is trusted when it pins the full card's step time to ±10 % (two standard errors);
# otherwise its shape is the reference's.
_MAX_FULL_STEP_ERROR = 0.10

NOT_ENOUGH_DATA = "Not enough recent traffic to estimate this endpoint's throughput yet."

Basis = Literal["curve", "seed_ratio"]


@dataclass(frozen=True)
class Sample:
    """One poll of one model: sequences running, and tokens generated per second."""

    running: float
    tokens_per_s: float


@dataclass(frozen=True)
class CapacityEstimate:
    model: str
    a: float  # seconds: the fixed cost of one decode step
    c: float  # seconds per running sequence, added to every step
    slots: int  # sequences the replicas run at once: Σ max_num_seqs
    samples: int  # busy samples the fit used
    running_min: float  # the loads actually observed; figures outside them are extrapolated
    running_max: float
    # "curve": a and c fitted. "seed_ratio": the loads seen could not separate the two costs,
    # so c = SEED_STEP_RATIO · a, scaled to match them; figures far outside the loads are assumed.
    basis: Basis

    def tokens_per_second(self, running: float) -> float:
        """Aggregate generation throughput with `running` sequences in the batch."""
        return running / (self.a + self.c * running)

    @property
    def total_tokens_per_second(self) -> float:
        """What the replicas sustain when every slot is busy."""
        return self.tokens_per_second(self.slots)

    def per_user(self, users: int) -> float:
        """Expected tok/s for each of `users` concurrent streams."""
        if users < 1:
            raise ValueError(f"users must be at least 1, got {users}")
        if users <= self.slots:
            return 1.0 / (self.a + self.c * users)
        # The engine runs `slots` at a time and queues the rest: on average everyone gets an
        # equal share of the full batch's throughput.
        return self.total_tokens_per_second / users

    def per_user_table(self) -> dict[int, float]:
        return {users: self.per_user(users) for users in USER_COUNTS}

    def sentence(self, users: int = DEFAULT_USERS) -> str:
        """The public one-liner for the capacity page and the docs."""
        people = "user" if users == 1 else "users"
        return (
            f"This endpoint serves roughly {_two_figures(self.total_tokens_per_second)} tokens "
            f"per second in total; at {users} concurrent {people} expect about "
            f"{_whole(self.per_user(users))} tokens per second each."
        )


NO_REPLICA_SERVING = "No replica of this model takes new requests right now."


def public_sentence(estimate: CapacityEstimate | None, users: int = DEFAULT_USERS) -> str:
    return NOT_ENOUGH_DATA if estimate is None else estimate.sentence(users)


def for_replicas(curve: CapacityEstimate, slots: Sequence[int]) -> CapacityEstimate | None:
    """One replica's fitted curve, scaled to the replicas serving now (`slots`: each one's
    max_num_seqs); None when none serves. Even spreading makes each of R replicas run n / R of
    n sequences, so the total over R follows a + (c / R)·n."""
    if not slots:
        return None
    return dataclasses.replace(curve, c=curve.c / len(slots), slots=sum(slots))


def estimate_capacity(
    model: str,
    samples: Iterable[Sample | tuple[float, float]],
    slots: int,
    min_samples: int = MIN_SAMPLES,
) -> CapacityEstimate | None:
    """Fit the step model to samples (typically the last hour); None when too few were busy."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    busy = [
        (n, g) for n, g in (_pair(s) for s in samples)
        if n >= 1 and g > 0 and math.isfinite(n) and math.isfinite(g)
    ]
    if len(busy) < min_samples:
        return None

    steps = [(n, n / g) for n, g in busy]
    points = _binned_medians(steps)
    line = _refine(steps, _fit_line(points))
    basis: Basis = "curve"
    seed = _seed_shaped(points)
    imprecise = 2 * line.c_error * slots > _MAX_FULL_STEP_ERROR * (line.a + line.c * slots)
    if imprecise and abs(line.c - seed.c) <= 2 * line.c_error:
        # The loads seen were too few or too close together to tell the per-sequence cost
        # from noise, and the full card's figure would follow that noise; the reference shape
        # fits them as well. (A slope the data set clearly apart from the reference's is kept,
        # however loosely they pin it: the reference shape would then miss the loads observed.)
        line = seed
        basis = "seed_ratio"
    return CapacityEstimate(
        model=model, a=line.a, c=line.c, slots=slots, samples=len(busy),
        running_min=min(n for n, _ in busy), running_max=max(n for n, _ in busy),
        basis=basis,
    )


def sample_from_scrapes(pairs: Sequence[tuple[Snapshot, Snapshot]]) -> Sample | None:
    """One model's sample from one poll: (previous, current) scrape of each of its replicas.

    None when any replica's throughput is unknown: leaving its tokens out but not its sequences
    (or both) would put a point off the curve the other polls trace.
    """
    if not pairs:
        return None
    running = 0.0
    tokens_per_s = 0.0
    for prev, cur in pairs:
        generated = rates_between(prev, cur).generation_tokens_per_s
        if generated is None:
            return None
        # The tokens were made across the interval; the mean of its two ends follows a ramp
        # better than either gauge alone.
        running += (prev.running + cur.running) / 2
        tokens_per_s += generated
    return Sample(running, tokens_per_s)


def _pair(sample: Sample | tuple[float, float]) -> tuple[float, float]:
    if isinstance(sample, Sample):
        return sample.running, sample.tokens_per_s
    n, g = sample
    return float(n), float(g)


def _binned_medians(steps: list[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """(load, step seconds, weight) per whole number of running sequences.

    Medians, because an hour of polls holds outliers a mean would follow: intervals spent mostly
    in prefill generate few tokens for the sequences they hold. A median is as trustworthy as
    its sample count, and the noise on a step time grows with it, so each weighs count / step².
    """
    bins: dict[int, list[tuple[float, float]]] = {}
    for n, step in steps:
        bins.setdefault(round(n), []).append((n, step))
    points = []
    for _, members in sorted(bins.items()):
        step = statistics.median(s for _, s in members)
        points.append((statistics.median(n for n, _ in members), step, len(members) / step**2))
    return points


@dataclass(frozen=True)
class _Line:
    a: float
    c: float
    c_error: float  # the standard error of c; infinite when the points cannot tell


def _refine(steps: list[tuple[float, float]], line: _Line) -> _Line:
    """Refit on every sample near the medians' line.

    Medians resist outliers but waste most of the samples' information; once the outliers are
    known, a fit over each sample averages the noise down several times faster.
    """
    a, c = line.a, line.c
    residuals = [step / (a + c * n) - 1 for n, step in steps]
    # Three robust standard deviations, never under 3 % so noise-free data keeps every sample.
    cutoff = 3 * max(1.4826 * statistics.median(abs(r) for r in residuals), _MIN_NOISE)
    kept = [
        (n, step, 1 / (a + c * n) ** 2)  # the line's step, not the sample's: no bias to fast
        for (n, step), r in zip(steps, residuals, strict=True) if abs(r) <= cutoff
    ]
    if len({round(n) for n, _, _ in kept}) < 2:
        return line
    return _fit_line(kept)


def _fit_line(points: list[tuple[float, float, float]]) -> _Line:
    """Weighted least squares of step = a + c·n over (n, step, weight), with a ≥ 0 and c ≥ 0."""
    sw = math.fsum(w for _, _, w in points)
    sx = math.fsum(w * n for n, _, w in points)
    sy = math.fsum(w * step for _, step, w in points)
    sxx = math.fsum(w * n * n for n, _, w in points)
    sxy = math.fsum(w * n * step for n, step, w in points)
    det = sw * sxx - sx * sx
    if det <= 1e-12 * sw * sxx or len(points) < 3:
        # One load, or two points the line passes through exactly: no measure of the slope.
        return _Line(sy / sw, 0.0, math.inf)
    c = (sw * sxy - sx * sy) / det
    a = (sy - c * sx) / sw
    # The weights are relative (count / step²), so the scatter about the line sets their scale.
    scatter = math.fsum(w * (step - a - c * n) ** 2 for n, step, w in points) / (len(points) - 2)
    c_error = math.sqrt(scatter * sw / det)
    if c < 0:
        # Steps that shorten as the batch grows are noise over a flat curve.
        return _Line(sy / sw, 0.0, c_error)
    if a < 0:
        # The costs are positive; the best line on the boundary goes through the origin.
        return _Line(0.0, sxy / sxx, c_error)
    return _Line(a, c, c_error)


def _seed_shaped(points: list[tuple[float, float, float]]) -> _Line:
    """The best a with c = SEED_STEP_RATIO · a: exact where a single load was observed."""
    shape = [(1 + SEED_STEP_RATIO * n, step, w) for n, step, w in points]
    a = math.fsum(w * u * step for u, step, w in shape) / math.fsum(w * u * u for u, _, w in shape)
    return _Line(a, SEED_STEP_RATIO * a, 0.0)


def _two_figures(value: float) -> str:
    """Two significant figures with thousands separators: 2,015 → "2,000", 1,540 → "1,500"."""
    if value <= 0:
        return "0"
    rounded = round(value, 1 - math.floor(math.log10(value)))
    return f"{rounded:,.0f}" if rounded >= 10 else f"{rounded:g}"


def _whole(value: float) -> str:
    # A whole number reads best; below one token a second, "0" would be false, so show one figure.
    return f"{round(value):,}" if value >= 0.95 else f"{value:.1g}"
