"""The request log's page query at scale: 5 million usage records (30 days, ~200 people) on
PostgreSQL, and the staff page's first page for one person and one day, timed against the
unfiltered first page. Target: one person, one day answers within 300 ms.

    nice .venv/bin/python -m bench.request_log [--rows N] [--rounds R] [--keep] [--postgres URL]

It works in a database of its own (gp_bench_request_log by default), made, migrated and filled
here and dropped at the end (--keep leaves it for a second run, which then skips the filling). The
rows are made by PostgreSQL itself (INSERT ... SELECT over generate_series, in chunks), with
every index and constraint the migrations make in place, then ANALYZEd. The query timed is the
page's own: fairness.portal.reports.request_log's rows_for and page_of, the user looked up by
name as the form gives it. Also timed, for scale: the second page of that day (by its keyset
cursor), and a page 1,000 pages deep in the unfiltered log by keyset and by OFFSET (what a
numbered pager would run). Variants run in interleaved rounds, each a random person and day;
figures are medians over rounds, ratios the median of the per-round ratios. Writes
bench/results/request_log.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import report
from bench.harness import ROOT, private_redis

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432"
DATABASE = "gp_bench_request_log"
PEOPLE = 200
DAYS = 30
CHUNK = 500_000
TARGET_MS = 300.0
DEEP_PAGES = 1000


def _admin(url: str, sql: str) -> None:
    """Run a statement outside a transaction in the server's maintenance database."""
    import psycopg

    with psycopg.connect(f"{url}/postgres", autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _exists(url: str) -> bool:
    import psycopg

    with psycopg.connect(f"{url}/postgres", autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is not None


def _setup_django(url: str) -> None:
    # Before django.setup(): the settings read these once.
    os.environ["DATABASE_URL"] = f"{url}/{DATABASE}"
    # A Redis of its own: saving keys and users tells the gateways (config epoch) through it.
    os.environ["REDIS_URL"] = os.environ["CELERY_BROKER_URL"] = private_redis()
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpuportal.settings"
    os.environ.setdefault("SECRET_KEY", secrets.token_hex(32))  # a throwaway key for a throwaway database
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    import django

    django.setup()


def _people() -> list[tuple[int, str, int]]:
    """(user id, username, key id) of the bench's people, made when missing."""
    from django.contrib.auth import get_user_model

    from fairness.models import ApiKey, Tier

    tier, _ = Tier.objects.get_or_create(name="bench", defaults={"per_key_concurrency": 2})
    users = get_user_model()
    people = []
    for n in range(PEOPLE):
        user, _ = users.objects.get_or_create(username=f"person{n:03d}")
        key = ApiKey.objects.filter(owner=user).first() or ApiKey.objects.create(
            owner=user, tier=tier, prefix=f"gp-bench{n:03d}", secret_hash=f"{n:064d}")
        people.append((user.pk, user.get_username(), key.pk))
    return people


def fill(rows: int, people: list[tuple[int, str, int]], now: dt.datetime) -> float:
    """Insert `rows` records spread over DAYS days before `now` and PEOPLE people; seconds taken."""
    from django.db import connection

    # The people's ids and keys as arrays, indexed by a random draw (1-based in SQL).
    users = "(ARRAY[" + ",".join(str(p[0]) for p in people) + "])"
    keys = "(ARRAY[" + ",".join(str(p[2]) for p in people) + "])"
    started = time.monotonic()
    with connection.cursor() as cursor:
        for first in range(1, rows + 1, CHUNK):
            last = min(rows, first + CHUNK - 1)
            cursor.execute(f"""
                INSERT INTO fairness_usagerecord (key_id, person_id, membership_id, request_id, endpoint, model,
                    replica, status, stream, prompt_tokens, completion_tokens, cached_tokens, queued_ms,
                    queue_estimate_ms, ttft_ms, latency_ms, tier, prompt_count_source, completion_count_source,
                    held_by, refusal, ended, created_at)
                SELECT {keys}[p], {users}[p], NULL, 'req-bench-' || g, 'chat/completions',
                    (ARRAY['qwen3-8b', 'llama-3.1-8b', 'bge-m3'])[1 + (g %% 3)], 'card-' || (g %% 4),
                    s.status, g %% 2 = 0, (random() * 4000)::int, (random() * 800)::int, 0,
                    CASE WHEN g %% 4 = 0 THEN (random() * 5000)::int ELSE 0 END, NULL,
                    (random() * 2000)::int, (random() * 20000)::int, 'bench', 'engine', 'engine',
                    (ARRAY['', '', 'person_cap', 'tier_pool', 'no_slot', 'fair_share_order'])[1 + (g %% 6)],
                    CASE WHEN s.status = 429 THEN 'rate_limited' ELSE '' END,
                    CASE s.status WHEN 200 THEN 'done' WHEN 429 THEN 'refused' WHEN 499 THEN 'client_gone'
                         ELSE 'engine_error' END,
                    %s::timestamptz - random() * interval '{DAYS} days'
                FROM generate_series(%s, %s) AS g,
                     LATERAL (SELECT 1 + floor(random() * {len(people)})::int AS p,
                                     (ARRAY[200, 200, 200, 200, 200, 200, 200, 429, 499, 502])[1 + (g %% 10)]
                                         AS status) AS s
            """, [now, first, last])
            print(f"  {last:,} of {rows:,} rows ({time.monotonic() - started:.0f} s)", flush=True)
        cursor.execute("ANALYZE fairness_usagerecord")
    return time.monotonic() - started


def _timed(run: Callable[[], Any], repeats: int) -> float:
    """The median of `repeats` runs, in ms (the first run is not left out: each round's person
    and day are new, so a cold first read is part of what the page costs)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def variants(person: str, day: dt.datetime, deep_cursor: str) -> dict[str, Callable[[], Any]]:
    from fairness.models import UsageRecord
    from fairness.portal.reports.request_log import LogFilters, page_of, rows_for

    one_day = LogFilters(person=person, start=day, end=day + dt.timedelta(days=1))

    def person_day() -> Any:
        return page_of(rows_for(one_day))

    def person_day_page_2() -> Any:
        first = page_of(rows_for(one_day))
        return page_of(rows_for(one_day), before=first.older or "")

    def unfiltered() -> Any:
        return page_of(rows_for(LogFilters()))

    def deep_keyset() -> Any:
        return page_of(rows_for(LogFilters()), before=deep_cursor)

    def deep_offset() -> Any:
        size = 50
        rows = UsageRecord.objects.select_related("key", "person").order_by("-created_at", "-id")
        return list(rows[DEEP_PAGES * size:(DEEP_PAGES + 1) * size])

    return {"person_day": person_day, "person_day_page_2": person_day_page_2, "unfiltered": unfiltered,
            "deep_keyset": deep_keyset, "deep_offset": deep_offset}


def _deep_cursor() -> str:
    """The cursor DEEP_PAGES pages into the unfiltered log (found once, by OFFSET)."""
    from fairness.models import UsageRecord
    from fairness.portal.reports.request_log import PAGE_SIZE, cursor_of

    row = UsageRecord.objects.order_by("-created_at", "-id")[DEEP_PAGES * PAGE_SIZE - 1]
    return cursor_of(row)


def plan(person: str, day: dt.datetime) -> str:
    """PostgreSQL's plan for the one-person, one-day first page (EXPLAIN ANALYZE)."""
    from fairness.portal.reports.request_log import PAGE_SIZE, LogFilters, rows_for

    rows = rows_for(LogFilters(person=person, start=day, end=day + dt.timedelta(days=1)))[:PAGE_SIZE + 1]
    return str(rows.explain(analyze=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.request_log", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds, each a new person and day")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant per round (median)")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="the server, without a database name")
    parser.add_argument("--keep", action="store_true", help="leave the database for the next run")
    args = parser.parse_args(argv)
    started = time.monotonic()
    existed = _exists(args.postgres)
    if not existed:
        _admin(args.postgres, f"CREATE DATABASE {DATABASE}")
    try:
        _setup_django(args.postgres)
        from fairness.models import UsageRecord

        people = _people()
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        have = UsageRecord.objects.count()
        fill_s = None
        if have < args.rows:
            print(f"filling {args.rows - have:,} rows ...", flush=True)
            fill_s = fill(args.rows - have, people, now)
        total = UsageRecord.objects.count()
        deep_cursor = _deep_cursor()
        rng = random.Random(7)
        per_round: list[dict[str, float]] = []
        picks = []
        for r in range(args.rounds):
            _, person, _ = rng.choice(people)
            day = (now - dt.timedelta(days=rng.randint(1, DAYS - 1))).replace(hour=0, minute=0, second=0)
            runs = variants(person, day, deep_cursor)
            order = list(runs)
            rng.shuffle(order)  # interleaved: no variant always runs first (or warm)
            figures = {name: _timed(runs[name], args.repeats) for name in order}
            rows_found = len(runs["person_day"]().rows)
            per_round.append(figures)
            picks.append({"person": person, "day": day.date().isoformat(), "rows_on_page": rows_found})
            print(f"  round {r + 1}: {person} on {day.date()} ({rows_found} rows): "
                  + ", ".join(f"{name} {ms:.2f} ms" for name, ms in figures.items()), flush=True)
        names = list(per_round[0])
        medians = {name: statistics.median(f[name] for f in per_round) for name in names}
        worst = {name: max(f[name] for f in per_round) for name in names}
        ratio_unfiltered = statistics.median(f["person_day"] / f["unfiltered"] for f in per_round)
        ratio_deep = statistics.median(f["deep_offset"] / f["deep_keyset"] for f in per_round)
        print(report.table(["query", "median ms", "worst round ms"],
                           [[name, medians[name], worst[name]] for name in names],
                           title=f"Request log page queries, {total:,} records, {args.rounds} rounds"))
        print(f"\none person, one day / unfiltered first page: {ratio_unfiltered:.2f}x (median of per-round ratios)")
        print(f"1,000 pages deep, OFFSET / keyset: {ratio_deep:.1f}x")
        explained = plan(picks[0]["person"], dt.datetime.fromisoformat(picks[0]["day"]).replace(tzinfo=dt.UTC))
        print("\nplan of the one-person, one-day page:\n" + explained)
        targets = [
            report.target("one person, one day, first page (median)", medians["person_day"], "<=", TARGET_MS, "ms"),
            report.target("one person, one day, first page (worst round)", worst["person_day"], "<=", TARGET_MS,
                          "ms"),
        ]
        print()
        print(report.targets_table(targets))
        results = {
            "rows": total, "people": len(people), "days": DAYS, "fill_s": fill_s, "rounds": per_round,
            "picks": picks, "median_ms": medians, "worst_ms": worst,
            "person_day_over_unfiltered": ratio_unfiltered, "deep_offset_over_keyset": ratio_deep,
            "plan": explained, "targets": targets, "elapsed_s": time.monotonic() - started,
        }
        path = report.write_json("request_log", results)
        print(f"\nwrote {path} ({results['elapsed_s']:.0f} s)")
        return 0 if all(t["ok"] for t in targets) else 1
    finally:
        if not args.keep:
            # WITH (FORCE) ends this process's own connections to it too.
            _admin(args.postgres, f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


if __name__ == "__main__":
    sys.exit(main())
