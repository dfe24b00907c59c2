"""Benchmarks that run the real portal (gateway processes, Redis, enginesim) and write a JSON
report and a plot to ``bench/results/``.

    .venv/bin/python -m bench.fairness [--speed X] [--quick]
    .venv/bin/python -m bench.admission_cost [--quick]

Shared pieces: ``harness`` (a throwaway portal), ``load`` (streaming clients), ``measures``
(percentiles, Jain's index, windows), ``report`` (JSON, PNG, printed table).
"""
