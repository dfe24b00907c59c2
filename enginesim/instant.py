"""The ``--instant`` backend: no queue, no timing, just counters.

Used as the upstream when measuring a gateway's own overhead, so everything here is a handful of
integer additions per request. ``num_running`` counts responses being written, which makes
``peak_running`` meaningful for streams even here.
"""

from __future__ import annotations

from .config import SimConfig
from .metrics import EngineStats


class InstantEngine:
    def __init__(self, config: SimConfig) -> None:
        self.block_size = config.block_size
        self.num_gpu_blocks = config.gpu_blocks
        self.enable_prefix_caching = config.enable_prefix_caching
        self.stats = EngineStats()
        self.in_flight = 0
        self.alive = True

    @property
    def num_running(self) -> int:
        return self.in_flight

    @property
    def num_waiting(self) -> int:
        return 0

    @property
    def kv_usage(self) -> float:
        return 0.0

    def reset_peak(self) -> None:
        self.stats.peak_running = self.in_flight

    def enter(self) -> None:
        self.in_flight += 1
        if self.in_flight > self.stats.peak_running:
            self.stats.peak_running = self.in_flight

    def leave(self, prompt_tokens: int, generated: int, finish_reason: str) -> None:
        """Account one response; ``finish_reason`` "abort" when the client went away."""
        self.in_flight -= 1
        stats = self.stats
        stats.requests_total += 1
        stats.prompt_tokens += prompt_tokens
        stats.generation_tokens += generated
        stats.finished[finish_reason] += 1
