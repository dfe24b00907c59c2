"""Per-request usage: pushed to a Redis list on the request path, written to the DB in batches.

The request path never touches the database; a Celery task drains the list. A record is
removed from the list only after its batch is committed, so a crash loses nothing. With no task
draining it the list keeps only the newest GP_USAGE_BACKLOG_MAX events, and the drops are
counted (gateway/accounting.py: usage_commands).

A request's event may arrive more than once: the gateway pushes again what a restarted Redis may
have lost, and retries what it could not tell Redis took (gateway/usage_outbox.py). The flush
writes one row per request id: the database refuses a second (UsageRecord's unique request_id),
and each batch leaves out the ids already written, so the hourly rollup counts each once too.

An event the flush cannot write for what it holds (not readable, or refused by the database: a
count no column takes, say) is set aside in keyspace.USAGE_REJECTED and counted, never retried:
left in the list it would fail every batch it sat in, and the records behind it with it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import NamedTuple

import redis
import redis.asyncio
from django.contrib.auth import get_user_model
from django.db import DataError, IntegrityError, transaction

from fairness.accounting import usage_rollup
from fairness.gateway.accounting import (
    USAGE_DRAINED,
    USAGE_PUSHED,
    USAGE_REJECTED,
    UsageEvent,
    dropped_events,
)
from fairness.models import ApiKey, Membership, UsageRecord
from fairness.store import keyspace

log = logging.getLogger(__name__)

REJECTED_KEPT = 10_000  # the newest events set aside, for a person to look at


def flush(client: redis.Redis, batch_size: int = 1000) -> int:
    """Move up to batch_size queued events into the DB; returns how many were written."""
    # One flusher at a time, or two workers would write the same batch twice.
    lock = client.lock(keyspace.USAGE_FLUSH_LOCK, timeout=60)
    if not lock.acquire(blocking=False):
        return 0
    try:
        raw = client.lrange(keyspace.USAGE_EVENTS, 0, batch_size - 1)
        if not raw:
            return 0
        by_id: dict[str, UsageEvent] = {}
        rejected: list[bytes | str] = []
        for item in raw:
            event = _readable(item)
            if event is None:
                rejected.append(item)
            else:
                by_id.setdefault(event["request_id"], event)  # a copy pushed again is left out
        events = list(by_id.values())
        owners = dict(ApiKey.objects.filter(pk__in={e["key_id"] for e in events}).values_list("pk", "owner_id"))
        known = set(owners)
        _forget_the_deleted(events, owners)
        with transaction.atomic():
            written = set(
                UsageRecord.objects.filter(request_id__in=[e["request_id"] for e in events])
                .values_list("request_id", flat=True)
            )
            rows, refused = _insert([  # deleted keys' events drop
                e for e in events if e["key_id"] in known and e["request_id"] not in written
            ])
            usage_rollup.add(rows)
            for key_id, at in _last_use_by_key(rows).items():
                # update() sends no signals, so this does not disturb the gateways' caches.
                ApiKey.objects.filter(pk=key_id).update(last_used_at=at)
        rejected += [json.dumps(event).encode() for event in refused]
        # One MULTI: the books (pushed = drained + queued + dropped) must balance at any instant.
        with client.pipeline(transaction=True) as pipe:
            pipe.ltrim(keyspace.USAGE_EVENTS, len(raw), -1)
            pipe.hincrby(keyspace.GATEWAY_COUNTERS, USAGE_DRAINED, len(raw))
            if rejected:
                pipe.rpush(keyspace.USAGE_REJECTED, *rejected)
                pipe.ltrim(keyspace.USAGE_REJECTED, -REJECTED_KEPT, -1)
                pipe.hincrby(keyspace.GATEWAY_COUNTERS, USAGE_REJECTED, len(rejected))
            pipe.execute()
        if rejected:
            log.error("usage flush: %d events the database refused or could not read were set aside in %s",
                      len(rejected), keyspace.USAGE_REJECTED)
        return len(rows)
    finally:
        lock.release()


def _readable(item: bytes | str) -> UsageEvent | None:
    """The event, or None when it is not one (it would fail every batch it sat in)."""
    try:
        event = json.loads(item)
        _row(event)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not (isinstance(event["key_id"], int) and isinstance(event["request_id"], str)):
        return None
    return event  # type: ignore[no-any-return]


def _forget_the_deleted(events: list[UsageEvent], owners: dict[int, int]) -> None:
    """A person or membership deleted since the request ran is left out of its row (the row
    stays, under its key), so the batch's insert is not refused for it. An event from before
    the person was recorded was its key owner's."""
    for event in events:
        if "person_id" not in event and event["key_id"] in owners:
            event["person_id"] = owners[event["key_id"]]
    people = {e["person_id"] for e in events if isinstance(e.get("person_id"), int)}
    memberships = {e["membership_id"] for e in events if isinstance(e.get("membership_id"), int)}
    people &= set(get_user_model().objects.filter(pk__in=people).values_list("pk", flat=True))
    memberships &= set(Membership.objects.filter(pk__in=memberships).values_list("pk", flat=True))
    for event in events:
        if event.get("person_id") not in people:
            event["person_id"] = None
        if event.get("membership_id") not in memberships:
            event["membership_id"] = None


def _insert(events: list[UsageEvent]) -> tuple[list[UsageRecord], list[UsageEvent]]:
    """Write the events' rows; returns the rows written and the events the database refused.

    One INSERT for the batch. Only when that is refused for its data (a value too long for its
    column, say) is each row tried on its own, so one bad event cannot hold back the rest; an
    error of the database itself (it is away) fails the flush, and the next one tries again."""
    rows = [_row(e) for e in events]
    try:
        with transaction.atomic():
            return UsageRecord.objects.bulk_create(rows), []
    except (DataError, IntegrityError, ValueError, TypeError):
        pass
    written, refused = [], []
    for event, row in zip(events, rows, strict=True):
        try:
            with transaction.atomic():
                UsageRecord.objects.bulk_create([row])
            written.append(row)
        except (DataError, IntegrityError, ValueError, TypeError):
            log.exception("usage flush: the database refused request %s's record", event.get("request_id"))
            refused.append(event)
    return written, refused


class Backlog(NamedTuple):
    queued: int  # events waiting for the flush task
    dropped: int  # events dropped at the cap since Redis started
    outbox_waiting: int = 0  # events gateway outboxes still hold, as they last reported it


async def read_backlog(client: redis.asyncio.Redis) -> Backlog:
    """The backlog's length and the drops so far, read in one MULTI so the books balance."""
    async with client.pipeline(transaction=True) as pipe:
        pipe.hmget(keyspace.GATEWAY_COUNTERS, [USAGE_PUSHED, USAGE_DRAINED])
        pipe.llen(keyspace.USAGE_EVENTS)
        pipe.hvals(keyspace.USAGE_OUTBOX_WAITING)
        (pushed, drained), queued, waiting = await pipe.execute()
    dropped = dropped_events(int(pushed or 0), int(drained or 0), int(queued))
    return Backlog(int(queued), dropped, sum(int(n) for n in waiting))


def _row(event: UsageEvent) -> UsageRecord:
    return UsageRecord(
        key_id=event["key_id"],
        request_id=event["request_id"],
        endpoint=event["endpoint"],
        model=event["model"][:200],
        replica=event["replica"],
        status=event["status"],
        stream=event["stream"],
        prompt_tokens=event["prompt_tokens"],
        completion_tokens=event["completion_tokens"],
        cached_tokens=_cached_tokens(event),
        queued_ms=event["queued_ms"],
        queue_estimate_ms=_queue_estimate(event),
        ttft_ms=event["ttft_ms"],
        latency_ms=event["latency_ms"],
        tier=event.get("tier", "")[:40],
        person_id=event.get("person_id"),
        membership_id=event.get("membership_id"),
        prompt_count_source=str(event.get("prompt_count_source", ""))[:12],
        completion_count_source=str(event.get("completion_count_source", ""))[:12],
        held_by=str(event.get("held_by", ""))[:16],
        refusal=str(event.get("refusal", ""))[:32],
        ended=str(event.get("ended", ""))[:12],
        created_at=dt.datetime.fromtimestamp(event["at"], tz=dt.UTC),
    )


def _queue_estimate(event: UsageEvent) -> int | None:
    """The estimate it queued with, if a whole number of ms at least 0 (else none)."""
    estimate = event.get("queue_estimate_ms")
    return estimate if isinstance(estimate, int) and not isinstance(estimate, bool) and estimate >= 0 else None


def _cached_tokens(event: UsageEvent) -> int:
    """0 for an event from a gateway that did not record it (the outbox may hold one); never more
    than the prompt, so a recount from the rows charges what the gateway did."""
    cached, prompt = event.get("cached_tokens", 0), event["prompt_tokens"]
    if isinstance(cached, bool) or not isinstance(cached, int):
        return 0
    # A prompt count that is no count is the database's to refuse, with the row it is in.
    return max(0, min(cached, prompt) if isinstance(prompt, int) else cached)


def _last_use_by_key(rows: list[UsageRecord]) -> dict[int, dt.datetime]:
    latest: dict[int, dt.datetime] = {}
    for row in rows:
        if row.key_id not in latest or row.created_at > latest[row.key_id]:
            latest[row.key_id] = row.created_at
    return latest

