"""Saturation alerts: a queue persistently many times the batch, or a KV cache persistently full.

The queue counts only while the serving slots are full: requests that wait beside free slots are
held by their tier's own caps (a policy backlog), which more capacity would not shorten.

A state machine with explicit time, fed one observation per poll. An alert opens when its
condition has held at every observation for a whole window, and resolves when it has failed at
every observation for `resolve_window_seconds`, so a brief spike never opens one and a sustained
episode opens exactly one. "A queue that is always full is a capacity decision": the alert is
the evidence for that decision, not a page.

The Celery task keeps the state in Redis between runs (`to_state` / `from_state`); no Django
imports, so the tests drive it directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Kind = Literal["queue", "kv"]
Event = Literal["opened", "resolved"]
KINDS: tuple[Kind, ...] = ("queue", "kv")

_STATE_VERSION = 1


@dataclass(frozen=True)
class Figures:
    """One observation: the numbers an alert quotes."""

    waiting: float  # gateway queue + engine queue
    running: float
    ratio: float  # waiting / max(running, 1)
    kv_usage: float | None  # 0–1; None when the engine does not export it


@dataclass(frozen=True)
class Transition:
    kind: Kind
    event: Event
    at: float
    started_at: float  # when the condition began holding without a break
    # The episode's peak so far: on "opened", the figures that opened it; on "resolved", the
    # worst seen over the whole episode. The queue peaks on waiting, the KV cache on kv_usage.
    peak: Figures


@dataclass
class _Track:
    """One kind of alert. Runs are measured between observations, never across a gap."""

    open: bool = False
    run_since: float | None = None  # condition true at every observation since (while closed)
    clear_since: float | None = None  # condition false at every observation since (while open)
    started_at: float | None = None
    last_seen: float | None = None
    peak: Figures | None = None

    def to_dict(self) -> dict[str, Any]:
        state = asdict(self)
        state["peak"] = None if self.peak is None else asdict(self.peak)
        return state

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> _Track:
        peak = state["peak"]
        return cls(
            open=bool(state["open"]),
            run_since=_optional_float(state["run_since"]),
            clear_since=_optional_float(state["clear_since"]),
            started_at=_optional_float(state["started_at"]),
            last_seen=_optional_float(state["last_seen"]),
            peak=None if peak is None else Figures(
                waiting=float(peak["waiting"]), running=float(peak["running"]),
                ratio=float(peak["ratio"]), kv_usage=_optional_float(peak["kv_usage"]),
            ),
        )


class SaturationDetector:
    """One per model, fed the model's summed figures at every poll."""

    def __init__(
        self,
        k: float = 4.0,
        window_seconds: float = 60.0,
        kv_threshold: float = 0.95,
        kv_window_seconds: float = 120.0,
        resolve_window_seconds: float = 30.0,
        # Three missed polls at the ~2 s cadence: past that the poller was down, and nothing
        # is known about what the queue did meanwhile.
        max_gap_seconds: float = 6.0,
    ) -> None:
        self.k = k
        self.windows: dict[Kind, float] = {"queue": window_seconds, "kv": kv_window_seconds}
        self.kv_threshold = kv_threshold
        self.resolve_window_seconds = resolve_window_seconds
        self.max_gap_seconds = max_gap_seconds
        self._tracks: dict[Kind, _Track] = {kind: _Track() for kind in KINDS}

    def observe(
        self, t: float, waiting: float, running: float, kv_usage: float | None,
        free_slots: float | None = None,
    ) -> list[Transition]:
        """Take one poll's figures at time `t` (seconds); return the alerts it opens or resolves.
        `free_slots`: serving slots no request holds (None when admission does not know)."""
        figures = Figures(waiting, running, waiting / max(running, 1.0), kv_usage)
        transitions: list[Transition] = []
        full = free_slots is None or free_slots <= 0
        queue = self._step("queue", t, figures.ratio >= self.k and full, figures)
        if queue is not None:
            transitions.append(queue)
        # An engine without a KV gauge gives no evidence either way: the KV track skips it.
        if kv_usage is not None:
            kv = self._step("kv", t, kv_usage >= self.kv_threshold, figures)
            if kv is not None:
                transitions.append(kv)
        return transitions

    def is_open(self, kind: Kind) -> bool:
        return self._tracks[kind].open

    def to_state(self) -> dict[str, Any]:
        """A JSON-ready dict. The thresholds are not in it: they come from settings each run."""
        return {
            "version": _STATE_VERSION,
            "tracks": {kind: track.to_dict() for kind, track in self._tracks.items()},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any], **config: float) -> SaturationDetector:
        """Resume from `to_state()`; `config` as for the constructor. ValueError if unreadable."""
        detector = cls(**config)
        try:
            if state["version"] != _STATE_VERSION:
                raise ValueError(f"saturation state version {state['version']!r}")
            detector._tracks = {kind: _Track.from_dict(state["tracks"][kind]) for kind in KINDS}
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"unreadable saturation state: {exc!r}") from exc
        return detector

    def _step(self, kind: Kind, t: float, holds: bool, figures: Figures) -> Transition | None:
        track = self._tracks[kind]
        if track.last_seen is not None:
            if t <= track.last_seen:
                # A late or repeated poll (overlapping task runs): time only moves forward.
                return None
            if t - track.last_seen > self.max_gap_seconds:
                # An open alert stays open: only observations can show the queue drained.
                track.run_since = None
                track.clear_since = None
                if not track.open:
                    track.peak = None
        track.last_seen = t

        if not track.open:
            if not holds:
                track.run_since = None
                track.peak = None
                return None
            if track.run_since is None:
                track.run_since = t
            track.peak = self._worse(kind, track.peak, figures)
            if t - track.run_since < self.windows[kind]:
                return None
            track.open = True
            track.started_at = track.run_since
            track.run_since = None
            return Transition(kind, "opened", t, track.started_at, track.peak)

        if holds:
            track.clear_since = None
            track.peak = self._worse(kind, track.peak, figures)
            return None
        if track.clear_since is None:
            track.clear_since = t
        if t - track.clear_since < self.resolve_window_seconds:
            return None
        assert track.started_at is not None and track.peak is not None
        resolved = Transition(kind, "resolved", t, track.started_at, track.peak)
        self._tracks[kind] = _Track(last_seen=t)
        return resolved

    @staticmethod
    def _worse(kind: Kind, peak: Figures | None, figures: Figures) -> Figures:
        if peak is None:
            return figures
        if kind == "queue":
            return figures if figures.waiting > peak.waiting else peak
        return figures if (figures.kv_usage or 0.0) > (peak.kv_usage or 0.0) else peak


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
