"""Runs demo traffic against a gateway: chatting users and a batch job, until Ctrl-C."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fairness.demo import traffic_generator


def _keys(given: list[str] | None, env: str) -> tuple[str, ...]:
    # The environment keeps the secrets out of the process list (`manage.py demo` uses it).
    if given:
        return tuple(given)
    return tuple(k.strip() for k in os.environ.get(env, "").split(",") if k.strip())


class Command(BaseCommand):
    help = (
        "Send demo traffic through a gateway: one chatting user per --key (short streamed replies, "
        "think time between turns) and a batch job per --batch-key (several long requests at once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000",
                            help="The gateway, without /v1.")
        parser.add_argument("--model", default="demo")
        parser.add_argument("--key", action="append", help="An interactive user's key (repeatable; "
                            "default: $GP_TRAFFIC_KEYS, comma-separated).")
        parser.add_argument("--batch-key", action="append", help="A batch job's key (repeatable; "
                            "default: $GP_TRAFFIC_BATCH_KEYS).")
        parser.add_argument("--batch-concurrency", type=int,
                            default=traffic_generator.TrafficPlan.batch_concurrency,
                            help="Requests each batch job keeps submitted (default %(default)s).")
        parser.add_argument("--minutes", type=float, default=None, help="Stop after this long.")
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args: Any, url: str, model: str, key: list[str] | None, batch_key: list[str] | None,
               batch_concurrency: int, minutes: float | None, seed: int | None, **options: Any) -> None:
        plan = traffic_generator.TrafficPlan(
            url=url, model=model,
            interactive_keys=_keys(key, "GP_TRAFFIC_KEYS"),
            batch_keys=_keys(batch_key, "GP_TRAFFIC_BATCH_KEYS"),
            batch_concurrency=batch_concurrency, seed=seed,
        )
        if not plan.interactive_keys and not plan.batch_keys:
            raise CommandError("Give at least one --key or --batch-key.")
        if batch_concurrency < 1 or (minutes is not None and minutes <= 0):
            raise CommandError("--batch-concurrency and --minutes must be positive.")
        self.stdout.write(
            f"Sending traffic to {url}: chatting users {len(plan.interactive_keys)}, batch jobs "
            f"{len(plan.batch_keys)} ({batch_concurrency} requests at a time). Ctrl-C stops it."
        )
        duration = minutes * 60 if minutes is not None else None

        def report(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()  # promptly, also into the demo's log file

        try:
            tally = asyncio.run(traffic_generator.run(plan, duration, report=report))
        except KeyboardInterrupt:
            self.stdout.write("Traffic stopped.")
            return
        self.stdout.write(tally.line())
