"""Where the /metrics pages captured from real engines are kept (tests/fixtures/metrics)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
