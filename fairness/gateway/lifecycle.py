"""One proxied request's life: its admission lease (which holds a slot on one replica), its usage
record.

`close()` gives back everything the request held and records what happened, exactly once,
whichever way the request ends (done, engine error, client gone, cancelled).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis.exceptions
from django.conf import settings

from fairness.gateway import abandoned_work, accounting, budget_rules, request_parsing, tracing
from fairness.gateway.api_keys import KeyInfo
from fairness.gateway.errors import ApiError
from fairness.gateway.process_counts import PROCESS_COUNTS
from fairness.gateway.request_parsing import ProxyRequest
from fairness.gateway.runtime import GatewayRuntime
from fairness.gateway.sse_relay import StreamTally
from fairness.scheduling import fair_share
from fairness.scheduling.admission import (
    BudgetExceeded,
    Demand,
    Grant,
    QueueFull,
    QueueTimeout,
    RateLimited,
    WillNotStartInTime,
)
from fairness.scheduling.directory import ReplicaInfo
from fairness.scheduling.limits import CompletionAsk
from fairness.store.redis_lane import Command, first_error

log = logging.getLogger(__name__)


# A request that names no max_tokens is estimated at this many completion tokens (a chat answer).
_DEFAULT_COMPLETION_ESTIMATE = 256


def prompt_estimate(body_bytes: int) -> int:
    """About four bytes of body per prompt token."""
    return body_bytes // 4


def request_estimate(request: ProxyRequest, body_bytes: int) -> float:
    """The weighted tokens a request will likely charge, before it runs: its prompt estimate and
    its completion limit as the engine reads it (the release settles the real count)."""
    limit = request_parsing.completion_limit(request)
    if limit is None:
        limit = _DEFAULT_COMPLETION_ESTIMATE
    return fair_share.weighted_tokens(
        prompt_estimate(body_bytes), int(limit),
        settings.GP_FAIRSHARE_WEIGHT_PROMPT, settings.GP_FAIRSHARE_WEIGHT_COMPLETION,
    )


def completion_ask(
    request: ProxyRequest, body_bytes: int, context_tokens: int | None = None
) -> CompletionAsk | None:
    """What a budgeted request asks of its budgets: the engine's own limit for it, or, when it
    runs to the end of the context, what the context leaves after its prompt (`context_tokens`:
    the one its replicas state, context_lengths.py; GP_MODEL_CONTEXT_TOKENS when none is given).
    None when it completes nothing (an embedding, a score): its budgets reserve its prompt alone."""
    if request.endpoint in request_parsing.POOLING:
        return None
    prompt = prompt_estimate(body_bytes)
    stated = request_parsing.completion_limit(request)
    least = settings.GP_BUDGET_MIN_COMPLETION_TOKENS
    context = settings.GP_MODEL_CONTEXT_TOKENS if context_tokens is None else context_tokens
    most = stated if stated is not None else max(least, context - prompt)
    return CompletionAsk(prompt * settings.GP_FAIRSHARE_WEIGHT_PROMPT, settings.GP_FAIRSHARE_WEIGHT_COMPLETION,
                         most, min(least, most))


# On a 429 refused for the client's own queue bound: how long the wait estimate said it would wait.
QUEUE_ESTIMATE_HEADER = "X-GPUPortal-Queue-Estimate-Ms"


def demand_of(
    key: KeyInfo, group: str, preference: tuple[str, ...] = (), estimate: float = 0.0,
    completion: CompletionAsk | None = None, redoable: bool = False, max_wait: float | None = None,
    refuse_if_late: bool = False,
) -> Demand:
    """`redoable`: the request can be sent again without its client noticing (its answer is not
    streamed), so a slot it borrows may be asked back. `max_wait`: the client's own bound on its
    wait in the queue (seconds), within the tier's; `refuse_if_late`: refused at once when the wait
    estimate is longer (Demand.refuse_if_late)."""
    tier = key.tier
    return Demand(
        key_id=key.unit,
        tier=tier.name,
        per_key_cap=tier.per_key_concurrency,
        pool_cap=tier.pool_concurrency,
        head_start_seconds=tier.head_start_seconds,
        borrow=tier.borrow_idle_slots,
        max_queued_per_key=tier.max_queued_per_key,
        max_queued_per_tier=tier.max_queued,
        max_wait_seconds=tier.max_queue_wait_seconds if max_wait is None else min(max_wait,
                                                                                  tier.max_queue_wait_seconds),
        group=group,
        preference=preference,
        association=key.association,
        share=key.share,
        fairshare_weight=tier.fairshare_weight_seconds,
        estimate=estimate,
        budgets=budget_rules.windows(key.budget_rules, time.time()) if key.budget_rules else (),
        rate_limits=key.rate_limits,
        completion=completion if key.budget_rules else None,
        revocable=redoable and tier.borrow_idle_slots,
        refuse_if_late=refuse_if_late,
    )


class RequestLifecycle:
    """What one proxied request holds, given back exactly once by `close`."""

    def __init__(
        self, runtime: GatewayRuntime, request_id: str, key: KeyInfo, endpoint: str, model: str,
        stream: bool, *, payload: dict[str, Any] | None = None, body_bytes: int = 0,
        completion_limit: int | None = None,
    ) -> None:
        self.runtime = runtime
        self.payload = payload  # to count the prompt if the client leaves before its usage comes
        self.body_bytes = body_bytes
        self.completion_limit = completion_limit  # the request's own (None: to the end of the context)
        self.replica: ReplicaInfo | None = None
        self.started = time.perf_counter()
        self.sent_at: float | None = None  # when it went to the replica that holds its slot
        self.held_seconds = 0.0  # from then to the end, when the answer did not come
        self.event: accounting.UsageEvent = {
            "key_id": key.id,
            "person_id": key.person_id,
            "membership_id": key.membership_id,
            "tier": key.tier.name,
            "request_id": request_id,
            "endpoint": endpoint,
            "model": model,
            "replica": "",
            "status": 0,
            "stream": stream,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cached_tokens": 0,
            "queued_ms": 0,
            "ttft_ms": None,
            "latency_ms": 0,
            "at": time.time(),
        }
        self.grant: Grant | None = None
        self.refusal: str | None = None  # why admission answered 429, for the rejection count
        self._closed = False
        # Its spans, when tracing is on (tracing.py); the engine call's traceparent, once bound.
        self.trace = tracing.request_trace(key, endpoint, model, stream, completion_limit) if tracing.ENABLED else None
        self.trace_headers: dict[str, str] | None = None

    async def admit(self, demand: Demand, handle: str | None = None) -> Grant:
        """Wait for a turn in the ageing queue and a slot on a replica (its lease id `handle`, if
        given); 429 when the key, its tier or the whole deployment queues too much, or it waits
        too long, or the client's own bound is below the wait estimate."""
        try:
            acquiring = self.runtime.admits.acquire(demand, handle, self._note_hold)
            self.grant = await (acquiring if self.trace is None else self.trace.admission(acquiring))
        except QueueFull as exc:
            self.refusal = "queue_full"
            raise ApiError(429, exc.message, "queue_full", retry_after=exc.retry_after) from None
        except QueueTimeout as exc:
            raise self._timed_out(exc) from None
        except BudgetExceeded as exc:
            self.refusal = "budget_exceeded"
            raise ApiError(429, exc.message, "budget_exceeded", retry_after=exc.retry_after) from None
        except RateLimited as exc:
            self.refusal = "rate_limited"
            raise ApiError(429, exc.message, "rate_limited", retry_after=exc.retry_after) from None
        self.event["queued_ms"] = round(self.grant.queued_seconds * 1000)
        if self.grant.queue_estimate is not None:
            self.event["queue_estimate_ms"] = round(self.grant.queue_estimate * 1000)
        return self.grant

    async def move(self, failed: ReplicaInfo) -> Grant:
        """`failed` did not answer this request: wait for a slot on another replica, in the
        request's old place in line (admission.move)."""
        assert self.grant is not None
        waited = time.perf_counter()
        try:
            self.grant = await self.runtime.admits.move(self.grant, failed.name, self._note_hold)
        except QueueTimeout as exc:
            raise self._timed_out(exc) from None
        self.event["queued_ms"] += round((time.perf_counter() - waited) * 1000)
        return self.grant

    async def requeue(self) -> Grant:
        """Admission asked this request's borrowed slot back (for a chat) and its engine request
        was dropped: wait for a slot again, in its old place in line."""
        assert self.grant is not None
        waited = time.perf_counter()
        try:
            self.grant = await self.runtime.admits.move(self.grant, "", self._note_hold)
        except QueueTimeout as exc:
            raise self._timed_out(exc) from None
        self.event["queued_ms"] += round((time.perf_counter() - waited) * 1000)
        return self.grant

    def _note_hold(self, held_by: str) -> None:
        """Admission queued the request, held by this (admission.HELD_BY): the last one told is
        what the request log keeps, whether the grant comes or not (a move granted at once keeps
        the one before)."""
        if held_by:
            self.event["held_by"] = held_by

    def _timed_out(self, exc: QueueTimeout) -> ApiError:
        self.refusal = "queue_timeout"
        if isinstance(exc, WillNotStartInTime):
            estimate = {} if exc.estimate is None else {QUEUE_ESTIMATE_HEADER: str(round(exc.estimate * 1000))}
            return ApiError(429, exc.message, "queue_timeout", retry_after=exc.retry_after, headers=estimate)
        return ApiError(429, exc.message, "queue_timeout", retry_after=exc.retry_after)

    def bind(self, replica: ReplicaInfo) -> None:
        """This request goes to `replica` (the one its lease holds a slot on)."""
        self.event["replica"] = replica.name
        self.replica = replica
        self.sent_at = time.perf_counter()
        if self.trace is not None:
            self.trace_headers = self.trace.engine_call(replica)

    async def close(self, status: int, tally: StreamTally | None = None) -> None:
        """Give back and account, once. The Redis work runs in the background: the client
        need not wait for it, and a cancelled request cannot interrupt it."""
        if self._closed:
            return
        self._closed = True
        self._finish_event(status, tally)
        if self.grant is not None:
            PROCESS_COUNTS.add(accounting.latency_increments(self.event))
        if self.trace is not None:
            self.trace.closed(self.event, tally)
        if self._left_uncounted():
            self.runtime.in_background(self._count_then_settle())
        else:
            self.runtime.in_background(self._settle())

    def _left_uncounted(self) -> bool:
        """The client left after the request reached an engine, before the engine's counts came."""
        return self.event["status"] == 499 and self.replica is not None and not self.event["prompt_tokens"]

    async def _count_then_settle(self) -> None:
        """Charge the prefill the engine ran: the prompt counted after the abort, off the request
        path (abandoned_work.py), then the same settlement as any request."""
        assert self.replica is not None
        try:
            counted, source = await abandoned_work.count_prompt(
                self.replica, self.event["endpoint"], self.payload or {}, self.body_bytes
            )
        except Exception:  # never lose the settlement (the lease, the usage) to the count
            log.warning("could not count the prompt of %s", self.event["request_id"], exc_info=True)
            counted, source = abandoned_work.calibration.estimate(self.body_bytes), "estimate"
        self.event["prompt_tokens"] = counted
        self.event["prompt_count_source"] = source
        if self.event.get("completion_count_source") == "unknown":
            self.event["completion_tokens"] = abandoned_work.decode_pace.estimate(self.held_seconds, self._room())
            self.event["completion_count_source"] = "estimate"
        await self._settle()

    def _room(self) -> int:
        """The most completion tokens the engine could have run this request to."""
        assert self.replica is not None
        limits = [self.completion_limit, self.grant.completion_limit if self.grant is not None else None]
        stated = [limit for limit in limits if limit is not None]
        if stated:
            return min(stated)
        context = self.runtime.context_lengths.of([self.replica])
        return max(0, context - self.event["prompt_tokens"])

    async def _settle(self) -> None:
        """The lease back and the usage recorded, in one round trip. If that fails, the usage
        waits in the process's outbox, which sends it again with the release as a retry (a lease
        no longer renewed expires within a TTL meanwhile)."""
        outbox = self.runtime.usage_outbox
        opened = self.runtime.lane.connections_opened  # tells the outbox which Redis took it
        # Counted here, where the engine's counts are in, whatever becomes of the round trip.
        PROCESS_COUNTS.add(accounting.counter_increments(self.event, admitted=self.grant is not None,
                                                         refusal=self.refusal))
        try:
            if self.grant is not None:
                await self.runtime.admits.release(self.grant, also=self._accounting(), charge=self._charge())
            else:
                error = first_error(await self.runtime.lane.execute(*self._accounting()))
                if error is not None:
                    raise error
        except (redis.exceptions.RedisError, OSError):
            log.warning("could not settle %s; its usage waits in the outbox", self.event["request_id"],
                        exc_info=True)
            outbox.keep(self.event, charge=self._unsettled())
        else:
            outbox.pushed(self.event, opened)

    def _unsettled(self) -> tuple[Demand, float, str] | None:
        """The failed release, to send again: the demand, its real weighted count, its lease."""
        return None if self.grant is None else (self.grant.demand, self._charge(), self.grant.lease_id)

    def budget_before(self) -> float | None:
        """What the tightest of its budgets kept before this request (None: no budget). Acquire
        reported what it kept after the reservation, so the reservation is added back."""
        if self.grant is None or self.grant.budget_left is None:
            return None
        return self.grant.budget_left + self.grant.demand.estimate

    def budget_after(self) -> float | None:
        """What it keeps after this request's real charge, once closed (the engine's counts are in)."""
        before = self.budget_before()
        return None if before is None or not self._closed else max(0.0, before - self._charge())

    def _charge(self) -> float:
        """The weighted tokens this request charges its association (fair share)."""
        return fair_share.weighted_tokens(
            self.event["prompt_tokens"], self.event["completion_tokens"],
            settings.GP_FAIRSHARE_WEIGHT_PROMPT, settings.GP_FAIRSHARE_WEIGHT_COMPLETION,
            cached=self.event.get("cached_tokens", 0), w_cached=settings.GP_FAIRSHARE_WEIGHT_CACHED_PROMPT,
        )

    def _accounting(self) -> list[Command]:
        return accounting.commands(self.event)

    def _finish_event(self, status: int, tally: StreamTally | None) -> None:
        self._count_event(status, tally)
        if self.refusal is not None:
            self.event["refusal"] = self.refusal
        self.event["ended"] = self._ending(self.event["status"])

    def _ending(self, status: int) -> str:
        """How the request ended, for the request log (UsageRecord.Ended). A request cancelled
        once shutdown cuts off what is still running was cut off, not left by its client."""
        if status == 499:
            return "shutdown" if self.runtime.cutting_off else "client_gone"
        if status < 400:
            return "done"
        return "refused" if self.sent_at is None else "engine_error"

    def _count_event(self, status: int, tally: StreamTally | None) -> None:
        event = self.event
        event["status"] = status
        ended = time.perf_counter()
        event["latency_ms"] = round((ended - self.started) * 1000)
        if tally is None:
            # A whole answer abandoned before it came: how far the engine got is not seen here,
            # only how long it had (an abandoned one is charged the estimate in _count_then_settle).
            event["completion_count_source"] = "unknown"
            if self.sent_at is not None:
                self.held_seconds = ended - self.sent_at
            return
        event["prompt_tokens"] = tally.prompt_tokens
        event["cached_tokens"] = tally.cached_tokens
        event["prompt_count_source"] = "engine"
        event["completion_tokens"] = tally.completion_tokens or tally.content_events
        event["completion_count_source"] = "engine" if tally.completion_tokens or tally.finished else "events"
        if tally.finished:
            abandoned_work.calibration.observe(self.body_bytes, tally.prompt_tokens)
            if self.sent_at is not None and not tally.failed:
                first = tally.first_byte_at if event["stream"] else None  # a whole answer's comes at its end
                abandoned_work.decode_pace.observe(
                    tally.completion_tokens, ended - self.sent_at, None if first is None else first - self.sent_at
                )
        if tally.first_byte_at is not None:
            event["ttft_ms"] = round((tally.first_byte_at - self.started) * 1000)
        if tally.failed:
            event["status"] = 502
        elif not tally.finished:
            event["status"] = 499  # the client went away before the end
