"""What one finished request leaves behind: its usage event and the gateway's counters.

The usage event rides the round trip that gives the request's lease back, so accounting costs
the request path no round trip of its own. The counters are added up in the process and flushed
about once a second for all requests together (process_counts.py): five to seven fields a
request that rode the release before. The telemetry layer reads both back: the flush task drains
the events into the database (accounting/usage.py) and /metrics reads the counters
(telemetry/gateway_metrics.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NotRequired, TypedDict

import orjson
from django.conf import settings
from prometheus_client import utils as prometheus_utils

from fairness.gateway import latency_histograms
from fairness.store import keyspace
from fairness.store.redis_lane import Command

# Upper bounds (seconds) of the queue-wait buckets: from "no wait" to the batch tier's hour.
# A request is stored in its own bucket only; the scrape makes them cumulative. Changing the
# bounds strands the old fields: they are skipped until Redis is flushed.
WAIT_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                600.0, 1800.0, 3600.0, float("inf"))
UPSTREAM_FAILURES = (502, 504)  # what the gateway answers when an engine failed or timed out

# Counter fields, "|"-separated (tier and replica names are slugs, so never contain one):
#   req|tier|status|endpoint   tok|tier|kind   wait|tier|le   waitsum|tier
#   rej|tier|reason            uperr|replica
#   usage|pushed   usage|drained   (the usage backlog's books: see usage_commands)
#   usage|retried  usage|outbox_dropped  usage|repushed   (the per-process outboxes: usage_outbox.py)
#   usage|rejected   (events the flush set aside: accounting/usage.py)
#   dur|…  ttft|…  tpot|…  and their sums   (the latency histograms: latency_histograms.py)
#   http|status|reason   (every answer, refusals too)
# The last two are counted in each process and flushed once a second (process_counts.py); the
# others ride the round trip that records the usage event.

# The `le` label as Prometheus spells it ("+Inf", "0.005"); prometheus_client leaves it unannotated.
_le_label: Callable[[float], str] = prometheus_utils.floatToGoString


class UsageEvent(TypedDict):
    key_id: int
    # Who asked and the association charged (a front end's key speaks for many people); events
    # from before they were recorded lack them, and a deleted one is written as None.
    person_id: NotRequired[int | None]
    membership_id: NotRequired[int | None]
    tier: NotRequired[str]  # the key's tier when the request ran (events from before it lack it)
    request_id: str
    endpoint: str
    model: str
    replica: str
    status: int
    stream: bool
    prompt_tokens: int
    completion_tokens: int
    # Of prompt_tokens, those found in the engine's prefix cache; events from before it lack it.
    cached_tokens: NotRequired[int]
    queued_ms: int
    # The wait estimate made when it queued; absent when it never queued (or none was made).
    queue_estimate_ms: NotRequired[int]
    ttft_ms: int | None
    latency_ms: int
    at: float
    # Where the counts came from (abandoned_work.py); events from before they were recorded lack them.
    prompt_count_source: NotRequired[str]
    completion_count_source: NotRequired[str]
    # The request log's (lifecycle.py): what held it in the queue (admission.HELD_BY; absent: it
    # never waited), admission's code when it refused it (absent: it did not), and how it ended
    # (ENDINGS; events from before it was recorded lack it).
    held_by: NotRequired[str]
    refusal: NotRequired[str]
    ended: NotRequired[str]


USAGE_PUSHED = "usage|pushed"
USAGE_DRAINED = "usage|drained"
USAGE_RETRIED = "usage|retried"  # events an outbox got into Redis after their first try failed
USAGE_OUTBOX_DROPPED = "usage|outbox_dropped"  # events an outbox dropped at its bound
USAGE_REPUSHED = "usage|repushed"  # events pushed again because Redis restarted empty
USAGE_REJECTED = "usage|rejected"  # events the flush set aside: unreadable, or refused by the database


def usage_record(event: UsageEvent) -> Command:
    """Queue the event for the flush task."""
    return ("RPUSH", keyspace.USAGE_EVENTS, orjson.dumps(event))  # (the flush reads either library's)


def usage_commands(event: UsageEvent, backlog_max: int) -> list[Command]:
    """Queue the event, keeping only the newest `backlog_max` (with no worker draining them the
    list would grow until Redis runs out of memory), and count it pushed.

    The drops are counted without Lua and without waiting for a reply: each push adds to
    `usage|pushed`, and the flush task adds what it takes off the list to `usage|drained`, each
    in one MULTI with its change to the list. An event neither drained nor still queued was
    dropped, so dropped = pushed - drained - queued (`dropped_events`), exact whenever the three
    are read in one MULTI (accounting/usage.py), however the trims and flushes interleave. (Events
    queued before this bookkeeping existed count as drained without having been pushed: the
    first that many drops after an upgrade go uncounted.)"""
    return [
        ("MULTI",),
        usage_record(event),
        ("LTRIM", keyspace.USAGE_EVENTS, -max(1, backlog_max), -1),
        ("HINCRBY", keyspace.GATEWAY_COUNTERS, USAGE_PUSHED, 1),
        ("EXEC",),
    ]


def usage_batch_commands(
    events: Sequence[UsageEvent], backlog_max: int, also: Sequence[Command] = ()
) -> list[Command]:
    """`usage_commands` for many events at once (one RPUSH, one trim, one count), with `also`
    (counter bumps) in the same MULTI."""
    return [
        ("MULTI",),
        ("RPUSH", keyspace.USAGE_EVENTS, *(orjson.dumps(event) for event in events)),
        ("LTRIM", keyspace.USAGE_EVENTS, -max(1, backlog_max), -1),
        ("HINCRBY", keyspace.GATEWAY_COUNTERS, USAGE_PUSHED, len(events)),
        *also,
        ("EXEC",),
    ]


def dropped_events(pushed: int, drained: int, queued: int) -> int:
    """Events pushed that were neither drained into the database nor are still queued."""
    return max(0, pushed - drained - queued)


def counter_increments(
    event: UsageEvent, *, admitted: bool, refusal: str | None
) -> dict[str, int | float]:
    """The counter fields one finished request adds to (pure, so it is tested on its own)."""
    tier = event.get("tier", "")
    status = event["status"]
    fields: dict[str, int | float] = {f"req|{tier}|{status}|{event['endpoint']}": 1}
    for kind, tokens in (
        ("prompt", event["prompt_tokens"]),
        ("completion", event["completion_tokens"]),
    ):
        if tokens:
            fields[f"tok|{tier}|{kind}"] = tokens
    if admitted:
        wait = event["queued_ms"] / 1000
        le = next(b for b in WAIT_BUCKETS if wait <= b)
        fields[f"wait|{tier}|{_le_label(le)}"] = 1
        fields[f"waitsum|{tier}"] = float(wait)
    if status == 429:
        # Not admitted: admission's own refusal; admitted: the engine itself answered 429.
        fields[f"rej|{tier}|{refusal or 'engine'}"] = 1
    if status in UPSTREAM_FAILURES and event["replica"]:
        fields[f"uperr|{event['replica']}"] = 1
    return fields


def latency_increments(event: UsageEvent) -> dict[str, int]:
    """The latency histogram fields an admitted request adds to (a refusal took no engine time:
    gpuportal_http_requests_total counts it). Counted in the process (process_counts.py)."""
    return latency_histograms.increments(
        tier=event.get("tier", ""), model=event["model"], stream=event["stream"], status=event["status"],
        latency_ms=event["latency_ms"], ttft_ms=event["ttft_ms"], completion_tokens=event["completion_tokens"],
    )


def increment_commands(fields: Mapping[str, int | float]) -> list[Command]:
    """Bump counter fields by these amounts."""
    return [
        ("HINCRBYFLOAT" if isinstance(amount, float) else "HINCRBY", keyspace.GATEWAY_COUNTERS,
         field, amount)
        for field, amount in fields.items()
    ]


def commands(event: UsageEvent) -> list[Command]:
    """What a finished request records in its release's round trip: its usage event. Its counter
    bumps (`counter_increments`) are counted in the process and flushed once a second
    (process_counts.py)."""
    return usage_commands(event, settings.GP_USAGE_BACKLOG_MAX)
