"""Usage reports: who used how much over a date range, from the per-request records, for the staff
page, its CSV and JSON, and `manage.py usage_report` (Slurm's `sreport`).

One pass over the range's records in the database's order, grouped in Python: that gives exact
percentiles on SQLite and PostgreSQL alike (neither shares a percentile function with the other),
and the totals come from the same records, so they always add up. The pass is bounded:
a range holding more than MAX_RECORDS requests is refused (TooManyRecords) rather than read, and
each group keeps its waits in compact arrays (8 bytes a request). Records are kept
GP_USAGE_RECORDS_DAYS days, so a range reaching further back counts only what is left.

Definitions: an error is a request answered with status >= 400 (refused, rate-limited, failed
upstream); weighted tokens are what fair share and budgets charge, GP_FAIRSHARE_WEIGHT_PROMPT x
uncached prompt + GP_FAIRSHARE_WEIGHT_CACHED_PROMPT x cached prompt + GP_FAIRSHARE_WEIGHT_COMPLETION x
completion; percentiles are nearest-rank (telemetry/latency.py);
TTFT leaves out requests that have none (refused before a first token).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from fairness.models import Account, ApiKey, Membership, UsageRecord
from fairness.scheduling.fair_share import weighted_tokens
from fairness.telemetry.latency import percentile

GROUPS = ("account", "user", "key", "model", "tier")
# The groupings the page offers; any one or two distinct GROUPS work in a URL or the command.
COMMON_GROUPINGS = ("account", "account,user", "user", "key", "model", "tier", "account,model", "tier,model")
MAX_RECORDS = 2_000_000
NO_ACCOUNT = "(no account)"
FIGURES = ("requests", "prompt_tokens", "completion_tokens", "weighted_tokens", "errors",
           "queue_p50_ms", "queue_p95_ms", "ttft_p50_ms", "ttft_p95_ms")


class BadReport(ValueError):
    """A request for a report that cannot be made; the message says why, for a person."""


class TooManyRecords(BadReport):
    pass


def parse_grouping(text: str) -> tuple[str, ...]:
    """"account,user" -> ("account", "user"): one or two distinct groups, in that order."""
    levels = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [level for level in levels if level not in GROUPS]
    if unknown:
        raise BadReport(f"Unknown grouping {', '.join(unknown)!s}: choose from {', '.join(GROUPS)}.")
    if not 1 <= len(levels) <= 2 or len(set(levels)) != len(levels):
        raise BadReport("Group by one or two different things, e.g. account or account,user.")
    return levels


def day_range(start: dt.date, end: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) as aware UTC instants: the end day itself is not included."""
    if start >= end:
        raise BadReport("The end date must come after the start date (the end day itself is not included).")
    return (dt.datetime.combine(start, dt.time(), dt.UTC), dt.datetime.combine(end, dt.time(), dt.UTC))


@dataclass
class _Bucket:
    requests: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    errors: int = 0
    waits: array[int] = field(default_factory=lambda: array("L"))
    ttfts: array[int] = field(default_factory=lambda: array("L"))

    def add(self, status: int, prompt: int, completion: int, cached: int, queued_ms: int,
            ttft_ms: int | None) -> None:
        self.requests += 1
        self.prompt += prompt
        self.completion += completion
        self.cached += min(cached, prompt)  # as the gateway charged it
        self.errors += status >= 400
        self.waits.append(queued_ms)
        if ttft_ms is not None:
            self.ttfts.append(ttft_ms)

    def merge(self, other: _Bucket) -> None:
        self.requests += other.requests
        self.prompt += other.prompt
        self.completion += other.completion
        self.cached += other.cached
        self.errors += other.errors
        self.waits.extend(other.waits)
        self.ttfts.extend(other.ttfts)


@dataclass(frozen=True)
class Row:
    """One line: `group` holds a name per grouping level ("" where a tree row sums its level)."""

    group: tuple[str, ...]
    requests: int
    prompt_tokens: int
    completion_tokens: int
    weighted_tokens: float
    errors: int
    queue_p50_ms: int | None
    queue_p95_ms: int | None
    ttft_p50_ms: int | None
    ttft_p95_ms: int | None
    depth: int = 0  # in a tree: 0 at the top account, one more per level under it
    cached_tokens: int = 0  # of prompt_tokens, those the engine had cached (charged less)

    def as_dict(self, by: tuple[str, ...]) -> dict[str, Any]:
        return {**dict(zip(by, self.group, strict=True)), **{name: getattr(self, name) for name in FIGURES}}


def _row(group: tuple[str, ...], bucket: _Bucket, depth: int = 0) -> Row:
    waits, ttfts = sorted(bucket.waits), sorted(bucket.ttfts)
    return Row(
        group=group, requests=bucket.requests, prompt_tokens=bucket.prompt, completion_tokens=bucket.completion,
        weighted_tokens=weighted_tokens(bucket.prompt, bucket.completion, settings.GP_FAIRSHARE_WEIGHT_PROMPT,
                                        settings.GP_FAIRSHARE_WEIGHT_COMPLETION, cached=bucket.cached,
                                        w_cached=settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT),
        cached_tokens=bucket.cached,
        errors=bucket.errors,
        queue_p50_ms=percentile(waits, 0.5) if waits else None,
        queue_p95_ms=percentile(waits, 0.95) if waits else None,
        ttft_p50_ms=percentile(ttfts, 0.5) if ttfts else None,
        ttft_p95_ms=percentile(ttfts, 0.95) if ttfts else None,
        depth=depth,
    )


@dataclass(frozen=True)
class Report:
    start: dt.date
    end: dt.date  # exclusive
    by: tuple[str, ...]
    rows: list[Row]
    total: Row
    kept_since: dt.datetime  # records before this have been pruned
    tree: bool = False  # account rows sum their subtrees (account_tree): not to be added up

    @property
    def reaches_past_retention(self) -> bool:
        return dt.datetime.combine(self.start, dt.time(), dt.UTC) < self.kept_since

    def as_dicts(self) -> list[dict[str, Any]]:
        return [{**row.as_dict(self.by), **({"depth": row.depth} if self.tree else {})} for row in self.rows]

    def as_json(self) -> dict[str, Any]:
        return {
            "from": self.start.isoformat(), "to": self.end.isoformat(), "by": list(self.by),
            "unit": "weighted tokens",
            "weights": {"prompt": settings.GP_FAIRSHARE_WEIGHT_PROMPT,
                        "cached_prompt": settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT,
                        "completion": settings.GP_FAIRSHARE_WEIGHT_COMPLETION},
            "errors": "requests answered with status >= 400",
            "records_kept_since": self.kept_since.isoformat(),
            "rows": self.as_dicts(), "tree": self.tree, "total": {name: getattr(self.total, name) for name in FIGURES},
        }


@dataclass(frozen=True)
class _KeyNames:
    account: str
    account_id: int | None
    user: str
    key: str
    tier: str


_GONE = _KeyNames(NO_ACCOUNT, None, "(deleted)", "(deleted)", "")


def _key_names(key_ids: Iterable[int]) -> dict[int, _KeyNames]:
    """Each key's account, owner, prefix and current tier. A key with no association charges its
    owner's default one (models.ApiKey.membership), so it is reported there."""
    keys = list(ApiKey.objects.filter(pk__in=set(key_ids)).select_related("owner", "tier", "membership__account"))
    defaults = {
        m.user_id: m for m in Membership.objects.filter(
            user_id__in={k.owner_id for k in keys if k.membership is None}, is_default=True
        ).select_related("account")
    }
    names = {}
    for key in keys:
        membership = key.membership or defaults.get(key.owner_id)
        account = membership.account if membership is not None else None
        names[key.pk] = _KeyNames(account.name if account else NO_ACCOUNT, account.pk if account else None,
                                  key.owner.get_username(), key.prefix, key.tier.name)
    return names


def _kept_since(now: dt.datetime) -> dt.datetime:
    return now - dt.timedelta(days=settings.GP_USAGE_RECORDS_DAYS)


def _buckets(start: dt.date, end: dt.date, by: tuple[str, ...]) -> tuple[dict[tuple[str, ...], _Bucket],
                                                                         dict[int, _KeyNames]]:
    since, until = day_range(start, end)
    records = UsageRecord.objects.filter(created_at__gte=since, created_at__lt=until)
    count = records.count()
    if count > MAX_RECORDS:
        raise TooManyRecords(f"That range holds {count:,} requests, more than the {MAX_RECORDS:,} a report "
                             "reads at once: choose a shorter range.")
    names = _key_names(records.order_by().values_list("key_id", flat=True).distinct())
    # A front end's key speaks for many people: its rows name the person and the account charged.
    asked_by = records.order_by().values_list("person_id", flat=True).distinct()
    charged_to = records.order_by().values_list("membership_id", flat=True).distinct()
    people = dict(get_user_model().objects.filter(pk__in=asked_by).values_list("pk", "username"))
    charged = dict(Membership.objects.filter(pk__in=charged_to).values_list("pk", "account__name"))
    buckets: dict[tuple[str, ...], _Bucket] = {}
    fields = ("key_id", "person_id", "membership_id", "model", "tier", "status", "prompt_tokens",
              "completion_tokens", "cached_tokens", "queued_ms", "ttft_ms")
    for key_id, person, membership, model, tier, status, prompt, completion, cached, queued, ttft in (
        records.order_by().values_list(*fields).iterator(chunk_size=5000)
    ):
        key = names.get(key_id) or _GONE  # deleted since the count: its records go with it
        values = {"account": charged.get(membership, key.account), "user": people.get(person, key.user),
                  "key": key.key, "model": model,
                  "tier": tier or key.tier}  # rows from before the tier column: the key's tier now
        group = tuple(values[level] for level in by)
        bucket = buckets.get(group)
        if bucket is None:
            bucket = buckets[group] = _Bucket()
        bucket.add(status, prompt, completion, cached, queued, ttft)
    return buckets, names


def _total(buckets: Iterable[_Bucket]) -> _Bucket:
    total = _Bucket()
    for bucket in buckets:
        total.merge(bucket)
    return total


def report(start: dt.date, end: dt.date, by: tuple[str, ...], now: dt.datetime | None = None) -> Report:
    """One row per group, largest weighted usage first (then by name); raises BadReport."""
    buckets, _ = _buckets(start, end, by)
    rows = sorted((_row(group, bucket) for group, bucket in buckets.items()),
                  key=lambda row: (-row.weighted_tokens, row.group))
    return Report(start, end, by, rows, _row(("",) * len(by), _total(buckets.values())),
                  _kept_since(now or dt.datetime.now(dt.UTC)))


def account_tree(start: dt.date, end: dt.date, with_users: bool = True, now: dt.datetime | None = None) -> Report:
    """Slurm's `sreport cluster AccountUtilizationByUser`: every account that used anything, depth
    first by name, its row summing its members and the accounts under it, each followed by its
    users' rows (by = account, user; a user row's account is the one it charged)."""
    buckets, _ = _buckets(start, end, ("account", "user"))
    accounts = {a.pk: a for a in Account.objects.all()}
    by_name = {a.name: a for a in accounts.values()}
    children: dict[int | None, list[Account]] = {}
    for account in accounts.values():
        children.setdefault(account.parent_id, []).append(account)
    own: dict[str, dict[str, _Bucket]] = {}
    for (account_name, user), bucket in buckets.items():
        own.setdefault(account_name, {})[user] = bucket

    def subtree(account: Account, seen: frozenset[int]) -> _Bucket:
        total = _total(own.get(account.name, {}).values())
        for child in children.get(account.pk, []):
            if child.pk not in seen:  # a cycle the form refuses, guarded against all the same
                total.merge(subtree(child, seen | {child.pk}))
        return total

    rows: list[Row] = []

    def walk(parent: int | None, depth: int, seen: frozenset[int]) -> None:
        for account in sorted(children.get(parent, []), key=lambda a: a.name):
            if account.pk in seen:
                continue
            total = subtree(account, seen | {account.pk})
            if total.requests == 0:
                continue  # as sreport: an account that used nothing in the period is left out
            rows.append(_row((account.name, ""), total, depth))
            if with_users:
                for user, bucket in sorted(own.get(account.name, {}).items()):
                    rows.append(_row((account.name, user), bucket, depth + 1))
            walk(account.pk, depth + 1, seen | {account.pk})

    walk(None, 0, frozenset())
    for name in sorted(set(own) - set(by_name)):  # keys charging no account at all
        rows.append(_row((name, ""), _total(own[name].values())))
        if with_users:
            rows.extend(_row((name, user), bucket, 1) for user, bucket in sorted(own[name].items()))
    return Report(start, end, ("account", "user"), rows, _row(("", ""), _total(buckets.values())),
                  _kept_since(now or dt.datetime.now(dt.UTC)), tree=True)


def _cell(value: object) -> object:
    # A name a spreadsheet would run as a formula (account and user names may start with + - @).
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


def as_csv(report: Report) -> str:
    """The report's rows (not the total) with a header line; empty cells where there is no figure."""
    out = io.StringIO()
    writer = csv.writer(out)  # RFC 4180 line ends: with "\n" a cell holding a bare CR went unquoted
    writer.writerow([*report.by, *FIGURES, *(["depth"] if report.tree else [])])
    for row in report.rows:
        writer.writerow([_cell(value) for value in (*row.group, *(getattr(row, name) for name in FIGURES),
                                                     *([row.depth] if report.tree else []))])
    return out.getvalue()
