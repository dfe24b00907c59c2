"""A tier's policy in plain sentences, for the capacity page, /me/ and the staff tiers page.

Each sentence must stay true of what admission does (scheduling/lua/acquire.lua): the caps, the
borrowing that may exceed them, the two limits that answer 429, and the ageing head start.
"""

from __future__ import annotations

import math

from django.conf import settings

from fairness.models import Tier


def duration_in_words(seconds: float) -> str:
    """120 -> "2 minutes", 5400 -> "1 hour 30 minutes", 45 -> "45 seconds"."""
    whole = round(seconds)
    if whole <= 0:
        return "no time"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        _count(hours, "hour"), _count(minutes, "minute"),
        # Seconds only matter below ten minutes; "1 hour 0 minutes 3 seconds" is noise.
        _count(secs, "second") if whole < 600 else "",
    ]
    return " ".join(part for part in parts if part) or _count(whole, "second")


def _count(n: int, unit: str) -> str:
    if n == 0:
        return ""
    return f"{n:,} {unit}" if n == 1 else f"{n:,} {unit}s"


def _requests(n: int) -> str:
    return "1 request" if n == 1 else f"{n:,} requests"


def _slots(n: int) -> str:
    return "1 slot" if n == 1 else f"{n:,} slots"


def _per_minute(limit: int | None, what: str, who: str) -> str:
    return f"{who} at most {limit:,} {what} a minute" if limit else ""


def _requests_per_minute(limit: int | None, who: str) -> str:
    """The limit with the burst lib/limits.lua allows: a twentieth of a minute's worth at once (at
    least one), then one each 60/limit seconds, so "3 a minute" is one every 20 s, not 3 at once."""
    if not limit:
        return ""
    burst, spacing = max(1, math.ceil(limit / 20)), f"{60 / limit:.3g} s"
    pace = f"one every {spacing}" if burst == 1 else f"up to {burst:,} at once, then one every {spacing}"
    return f"{who} at most {limit:,} requests a minute ({pace})"


def in_words(tier: Tier, *, reserve_slots: int | None = None) -> list[str]:
    """The tier's policy, one sentence per rule. ``reserve_slots`` defaults to GP_RESERVE_SLOTS."""
    reserve = settings.GP_RESERVE_SLOTS if reserve_slots is None else reserve_slots
    sentences = [
        f"Each person runs up to {_requests(tier.per_key_concurrency)} at a time, across all their "
        f"{tier.name} keys and any front end that speaks for them."
    ]
    if tier.pool_concurrency:
        sentences.append(
            f"All {tier.name} keys together run up to {_requests(tier.pool_concurrency)} at a time."
        )
    if tier.borrow_idle_slots:
        # Without this sentence the caps above read as a promise the live counts break.
        sentences.append(
            "While no one else is waiting, it also borrows idle slots beyond these caps. A streamed "
            f"answer leaves {_slots(reserve)} free for others and gives its slot back when it "
            "finishes; a whole answer (not streamed) may take every slot, and when someone needs "
            "one it is stopped and sent again later from its place in line, so it only waits longer."
        )
    across = f", {_requests(tier.max_queued)} across all {tier.name} keys" if tier.max_queued else ""
    sentences.append(
        f"Up to {_requests(tier.max_queued_per_key)} per person may wait{across}; "
        "one more is refused at once with 429 (Too Many Requests)."
    )
    sentences.append(
        f"A request that has waited {duration_in_words(tier.max_queue_wait_seconds)} "
        "without starting is refused with 429."
    )
    if tier.head_start_seconds > 0:
        head = duration_in_words(tier.head_start_seconds)
        sentences.append(
            f"Head start of {head}: its requests line up as if they had already waited {head}, "
            "so they go ahead of other tiers' requests that have waited less than that longer."
        )
    else:
        sentences.append(
            "No head start: its requests line up by arrival time, and a request of a tier with a "
            "head start goes ahead of them only until they have waited longer than that head start."
        )
    limits = [words for words in (
        _requests_per_minute(tier.key_requests_per_minute, "each person"),
        _per_minute(tier.key_tokens_per_minute, "weighted tokens", "each person"),
        _requests_per_minute(tier.requests_per_minute, f"all {tier.name} keys together"),
        _per_minute(tier.tokens_per_minute, "weighted tokens", f"all {tier.name} keys together"),
    ) if words]
    if limits:
        sentences.append("Rate limits: " + "; ".join(limits) + "; past one, 429 says when to retry.")
    if tier.fairshare_weight_seconds > 0:
        sentences.append(
            "Fair share: a request of an account that has used its whole share lately lines up as if it "
            f"had waited up to {duration_in_words(tier.fairshare_weight_seconds)} less than one of an "
            "account that has used nothing."
        )
    else:
        sentences.append("No fair share: what an account has used does not move its requests in line.")
    if tier.isolate_prefix_cache:
        sentences.append("Each user's cached prompts are kept apart from other users'.")
    return sentences
