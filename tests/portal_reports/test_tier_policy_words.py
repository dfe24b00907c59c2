"""The tier policy in plain sentences: every rule admission applies is said, and nothing else."""

from __future__ import annotations

from fairness.demo.default_tiers import DEFAULT_TIERS
from fairness.models import Tier
from fairness.portal.reports.tier_policy import duration_in_words, in_words


def _tier(name: str, **changes) -> Tier:
    fields = next(dict(t) for t in DEFAULT_TIERS if t["name"] == name)
    return Tier(**{**fields, **changes})


def test_batch_says_it_borrows_beyond_its_caps_so_thirteen_at_once_is_no_contradiction() -> None:
    words = in_words(_tier("batch"), reserve_slots=3)
    assert words[0] == "Each person runs up to 2 requests at a time, across all their batch keys and any " \
        "front end that speaks for them."
    assert words[1] == "All batch keys together run up to 2 requests at a time."
    borrowing = words[2]
    assert "borrows idle slots beyond these caps" in borrowing
    assert "While no one else is waiting" in borrowing
    assert "A streamed answer leaves 3 slots free for others" in borrowing
    # Work that can be redone takes them too: saying so keeps a full card from reading as a broken promise.
    assert "a whole answer (not streamed) may take every slot" in borrowing and "sent again later" in borrowing


def test_interactive_has_no_pool_and_no_borrowing() -> None:
    words = in_words(_tier("interactive"), reserve_slots=3)
    text = " ".join(words)
    assert "together" not in text
    assert "borrow" not in text
    assert words[0].startswith("Each person runs up to 2 requests at a time, across all their interactive keys")


def test_it_names_both_queue_limits_that_answer_429() -> None:
    words = in_words(_tier("batch", max_queued_per_key=1024, max_queued=256, max_queue_wait_seconds=3600))
    assert "Up to 1,024 requests per person may wait, 256 requests across all batch keys; one more is " \
        "refused at once with 429 (Too Many Requests)." in words
    assert "A request that has waited 1 hour without starting is refused with 429." in words
    interactive = in_words(_tier("interactive"))
    assert "Up to 16 requests per person may wait; one more is refused at once with 429 " \
        "(Too Many Requests)." in interactive
    assert "A request that has waited 2 minutes without starting is refused with 429." in interactive


def test_head_start_is_said_in_minutes_and_its_absence_too() -> None:
    interactive = " ".join(in_words(_tier("interactive")))
    assert "Head start of 10 minutes" in interactive
    batch = " ".join(in_words(_tier("batch")))
    assert "No head start" in batch
    assert "Head start of" not in batch


def test_singular_counts_read_as_english() -> None:
    words = in_words(_tier("batch", per_key_concurrency=1, pool_concurrency=1), reserve_slots=1)
    assert words[0].startswith("Each person runs up to 1 request at a time, across all their batch keys")
    assert "leaves 1 slot free" in words[2]


def test_isolated_prefix_cache_is_said_only_when_on() -> None:
    assert "kept apart" in " ".join(in_words(_tier("interactive", isolate_prefix_cache=True)))
    assert "kept apart" not in " ".join(in_words(_tier("interactive", isolate_prefix_cache=False)))


def test_reserve_defaults_to_the_setting(settings) -> None:
    settings.GP_RESERVE_SLOTS = 5
    assert "leaves 5 slots free" in " ".join(in_words(_tier("batch")))


def test_durations_in_words() -> None:
    assert duration_in_words(45) == "45 seconds"
    assert duration_in_words(60) == "1 minute"
    assert duration_in_words(90) == "1 minute 30 seconds"
    assert duration_in_words(120) == "2 minutes"
    assert duration_in_words(3600) == "1 hour"
    assert duration_in_words(5400) == "1 hour 30 minutes"
    assert duration_in_words(7205) == "2 hours"
    assert duration_in_words(0) == "no time"


def test_rate_limits_are_said_per_person_and_for_the_tier() -> None:
    words = " ".join(in_words(_tier("interactive", key_requests_per_minute=3, tokens_per_minute=50_000)))
    assert "Rate limits: each person at most 3 requests a minute (one every 20 s); all interactive keys " \
        "together at most 50,000 weighted tokens a minute; past one, 429 says when to retry." in words
    assert "Rate limits" not in " ".join(in_words(_tier("interactive")))
    # The burst said is the limiter's: a twentieth of a minute's worth at once.
    many = " ".join(in_words(_tier("interactive", requests_per_minute=1200)))
    assert "all interactive keys together at most 1,200 requests a minute (up to 60 at once, then one every " \
        "0.05 s)" in many


def test_fair_share_is_said_with_its_weight() -> None:
    weighted = " ".join(in_words(_tier("batch", fairshare_weight_seconds=300)))
    assert "as if it had waited up to 5 minutes less" in weighted
    assert "No fair share" in " ".join(in_words(_tier("batch", fairshare_weight_seconds=0)))
