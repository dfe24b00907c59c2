"""Counts each gateway process keeps in memory and adds to the shared counters hash about once a
second, in one round trip for all of them (`flush_forever`, started with the runtime):

- every answer the gateway's API gives, by status and reason, refusals before admission too. A
  request refused early (no key or a bad one, a bad body, too large, an unknown model, rate
  limited, no healthy replica) costs Redis nothing, and counting it must not change that;
- the latency histograms of admitted requests (latency_histograms.py): four to six fields a
  request, which rode its release's round trip before;
- every settled request's counters (accounting.counter_increments: requests, tokens, queue wait,
  refusals, engine failures), added as it settles, which rode the release's round trip too.

What Redis could not take is kept and added with the next flush; a process killed outright loses
at most its last second of counts. /metrics reads the totals of every process, like the other
counters.

An answer's reason is the OpenAI-shaped error's `code` when it is one of the gateway's own
(`KNOWN_REASONS`), "ok" below 400, and "other" for anything else (an engine's own code, or
none), so that no client or engine can make the label's values grow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

import redis.exceptions

from fairness.gateway import accounting
from fairness.store.redis_lane import RedisLane, first_error

log = logging.getLogger(__name__)

OK = "ok"
OTHER = "other"
CLIENT_CLOSED = "client_closed"  # the client left before the answer started (status 499)
FLUSH_SECONDS = 1.0

# The codes the gateway's ApiErrors carry (tests/metrics/test_latency_and_answers.py keeps this in step).
KNOWN_REASONS = frozenset({
    CLIENT_CLOSED,
    "ambiguous_person", "bad_filter", "batch_failed", "batch_not_cancellable", "batch_not_found", "budget_exceeded",
    "database_unavailable",
    "engine_response_too_large", "expired_api_key", "expired_user_token", "file_limit_reached",
    "file_not_found", "file_too_large", "front_end_route", "front_end_without_account", "gateway_error",
    "internal_error", "invalid_api_key", "invalid_file_format", "invalid_json", "invalid_multipart",
    "invalid_request", "invalid_type", "invalid_user_token", "invalid_value", "method_not_allowed",
    "missing_api_key", "missing_required_parameter", "model_not_allowed", "model_not_available_for_tier",
    "model_not_found", "no_healthy_replica", "not_signed_in", "owner_inactive", "playground_refused",
    "queue_full", "queue_timeout", "rate_limited", "replicas_changed", "request_headers_too_large",
    "request_timeout", "request_too_large", "response_not_found", "revoked_api_key", "server_busy",
    "shutting_down", "staff_person", "storage_quota_exceeded", "storage_unavailable", "store_unavailable",
    "stored_replica_unavailable", "too_many_batches", "unknown_person", "unknown_url", "unsupported_value",
    "upstream_error", "upstream_garbled", "upstream_misconfigured", "upstream_stream_broken",
    "upstream_timeout", "upstream_unreachable", "wrong_model_kind",
})


def reason_of(status: int, code: str | None) -> str:
    if status < 400:
        return OK
    return code if code in KNOWN_REASONS else OTHER


class ProcessCounts:
    """One process's counts not yet added to Redis. Used on one event loop, so no lock."""

    def __init__(self) -> None:
        self._pending: dict[str, int | float] = {}

    def count(self, status: int, code: str | None) -> None:
        """One answer of this status and error code."""
        field = f"http|{status}|{reason_of(status, code)}"
        self._pending[field] = self._pending.get(field, 0) + 1

    def add(self, fields: Mapping[str, int | float]) -> None:
        pending = self._pending
        for field, amount in fields.items():
            pending[field] = pending.get(field, 0) + amount

    def pending(self) -> dict[str, int | float]:
        return dict(self._pending)

    async def flush(self, lane: RedisLane) -> int:
        """Add what was counted to the shared hash in one round trip; kept if Redis refuses.
        Returns how many fields it added to."""
        if not self._pending:
            return 0
        taken, self._pending = self._pending, {}
        try:
            error = first_error(await lane.execute(*accounting.increment_commands(taken)))
            if error is not None:
                raise error
        except BaseException:
            # Perhaps counted twice if Redis ran them before the connection broke; never lost.
            self.add(taken)
            raise
        return len(taken)


PROCESS_COUNTS = ProcessCounts()  # the process's: the ASGI front and the lifecycles count, the runtime flushes


async def flush_forever(lane: RedisLane, every: float = FLUSH_SECONDS) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            await PROCESS_COUNTS.flush(lane)
        except (redis.exceptions.RedisError, OSError):
            log.debug("counts wait for Redis", exc_info=True)
        except Exception:  # the counts are kept; the loop must outlive a surprise
            log.warning("could not flush the counts", exc_info=True)


async def flush_at_exit(lane: RedisLane, timeout: float = 1.0) -> None:
    """A last, bounded try at what the loop had not flushed yet."""
    with contextlib.suppress(redis.exceptions.RedisError, OSError, TimeoutError):
        async with asyncio.timeout(timeout):
            await PROCESS_COUNTS.flush(lane)
