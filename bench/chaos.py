"""The chaos run of tests/chaos at length: 10,000 requests, a fault cycle every 90 s.

    python -m bench.chaos [--requests 10000] [--seed N] [--json PATH]

The scenario, the processes and the verdicts are the test's own (tests/chaos/): two gateway
processes, two 8-slot enginesim replicas, a private redis-server and a Celery worker; clients on
the openai SDK and raw HTTP, 30% abandoning while queued or mid-stream; gateway and replica
SIGKILLs, Redis SIGKILLed, SIGTERMed and restarted empty under long streams, all restarted.
Prints the figures as Markdown tables for docs/operations.md and writes the JSON report
(bench/results/chaos.json unless --json says otherwise). Exits 1 if an assertion of the test fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from bench.harness import LOGS, cleanup_on_sigterm, setup_django
from bench.report import environment
from tests.chaos.ground_truth import Report, as_json, judge, render
from tests.chaos.run import run
from tests.chaos.scenario import Scenario

RESULTS = Path(__file__).resolve().parent / "results"


def markdown(report: Report, scenario: Scenario) -> str:
    lines = [f"Chaos run: {scenario.requests:,} requests over {scenario.duration:.0f} s, "
             f"{len(scenario.faults)} faults, seed {scenario.seed}", "", "| figure | value |", "| --- | ---: |"]
    lines += [f"| {name} | {_cell(value)} |" for name, value in report.figures.items()]
    labels = sorted({label for counts in report.statuses.values() for label in counts})
    lines += ["", "| sent during | " + " | ".join(labels) + " |", "| --- |" + " ---: |" * len(labels)]
    for kind, counts in report.statuses.items():
        lines.append(f"| {kind} | " + " | ".join(str(counts.get(label, 0)) for label in labels) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=None, help="default: GP_CHAOS_SEED or a random one")
    parser.add_argument("--json", type=Path, default=RESULTS / "chaos.json")
    args = parser.parse_args()
    cleanup_on_sigterm()
    # The bench's own Django (its rows, a private Redis for their signals); the gateways get the
    # run's Redis, the one the faults stop.
    setup_django()
    scenario = Scenario.build(seed=args.seed, requests=args.requests)
    evidence = run(scenario, database_url=os.environ["DATABASE_URL"], secret_key=os.environ["SECRET_KEY"],
                   log_dir=LOGS)
    report = judge(scenario, evidence)
    print(render(report))
    print()
    print(markdown(report, scenario))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "scenario": {name: value for name, value in scenario.__dict__.items() if name != "faults"},
        "faults": [fault.__dict__ for fault in scenario.faults],
        **as_json(report),
        "environment": environment(),
    }, indent=1, default=str))
    print(f"\nwrote {args.json}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
