"""The query layer: totals that equal the records they come from, grouping at one and two levels,
nearest-rank percentiles over a known set, and [from, to) day edges. Plain database tests, so the
suite's PostgreSQL pass (DATABASE_URL set) runs every one of them on PostgreSQL too."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from django.test import override_settings

from fairness.models import UsageRecord
from fairness.portal.reports import usage as usage_report
from fairness.portal.reports.usage import BadReport, account_tree, parse_grouping, report
from tests.support.usage_records import DAY, NOON, record

NEXT_DAY = DAY + dt.timedelta(days=1)
FIGURES = ("requests", "prompt_tokens", "completion_tokens", "weighted_tokens", "errors")


def scatter(tree, n: int = 120, seed: int = 5) -> None:
    """Records of every key, model and status over the day, some without a first token."""
    rng = random.Random(seed)
    keys = [tree.alice, tree.bob, tree.carol, tree.carol_batch]
    for i in range(n):
        record(rng.choice(keys), at=NOON + dt.timedelta(seconds=rng.randrange(-40000, 40000)),
               prompt=rng.randrange(0, 500), completion=rng.randrange(0, 900), queued_ms=rng.randrange(0, 8000),
               ttft_ms=None if i % 7 == 0 else rng.randrange(20, 4000), status=rng.choice((200, 200, 200, 429, 502)),
               model=rng.choice(("sim", "big")))


def from_records() -> dict[str, float]:
    rows = list(UsageRecord.objects.all())
    prompt, completion = sum(r.prompt_tokens for r in rows), sum(r.completion_tokens for r in rows)
    return {"requests": len(rows), "prompt_tokens": prompt, "completion_tokens": completion,
            "weighted_tokens": prompt + 2 * completion, "errors": sum(r.status >= 400 for r in rows)}


@pytest.mark.parametrize("by", ["account", "user", "key", "model", "tier", "account,user", "tier,model"])
def test_the_rows_and_the_total_add_up_to_the_records(tree, by):
    scatter(tree)
    expected = from_records()
    result = report(DAY, NEXT_DAY, parse_grouping(by))
    for name in FIGURES:
        assert getattr(result.total, name) == expected[name], name
        assert sum(getattr(row, name) for row in result.rows) == expected[name], name
    assert len({row.group for row in result.rows}) == len(result.rows)


def test_the_total_carries_percentiles_over_every_record(tree):
    scatter(tree)
    waits = sorted(UsageRecord.objects.values_list("queued_ms", flat=True))
    result = report(DAY, NEXT_DAY, ("model",))
    assert result.total.queue_p50_ms == waits[(len(waits) + 1) // 2 - 1]


def test_it_groups_by_account_then_user_as_each_key_charges(tree):
    record(tree.alice, prompt=100, completion=10)
    record(tree.bob, prompt=7, completion=1)
    record(tree.carol, prompt=1, completion=1)
    record(tree.carol_batch, prompt=1, completion=2)
    rows = {row.group: row for row in report(DAY, NEXT_DAY, ("account", "user")).rows}
    assert set(rows) == {("lab", "alice"), ("proj", "bob"), ("other", "carol")}
    assert rows["lab", "alice"].weighted_tokens == 120
    assert rows["other", "carol"].requests == 2
    assert rows["other", "carol"].weighted_tokens == 8
    # Largest weighted usage first.
    assert [row.group for row in report(DAY, NEXT_DAY, ("account", "user")).rows][0] == ("lab", "alice")


def test_it_groups_by_key_model_and_the_tier_the_request_ran_in(tree):
    record(tree.carol, model="sim")
    record(tree.carol_batch, model="big")
    record(tree.carol_batch, model="big", tier="")  # written before the tier column: the key's tier now
    record(tree.carol, model="big", tier="batch")  # carol's key was batch when this one ran
    by_key = {row.group: row.requests for row in report(DAY, NEXT_DAY, ("key",)).rows}
    assert by_key == {(tree.carol.prefix,): 2, (tree.carol_batch.prefix,): 2}
    by_tier = {row.group: row.requests for row in report(DAY, NEXT_DAY, ("tier", "model")).rows}
    assert by_tier == {("interactive", "sim"): 1, ("batch", "big"): 3}


def test_a_key_naming_no_account_counts_under_its_owners_default(tree):
    tree.alice.membership = None
    tree.alice.save(update_fields=["membership"])
    record(tree.alice)
    assert [row.group for row in report(DAY, NEXT_DAY, ("account",)).rows] == [("lab",)]


def test_percentiles_are_nearest_rank_over_a_known_set(tree):
    for n in range(1, 101):  # waits 10..1000 ms, first tokens 1..100 ms, in a shuffled order
        record(tree.alice, queued_ms=((n * 37) % 100 + 1) * 10, ttft_ms=(n * 61) % 100 + 1)
    for _ in range(30):  # no first token: not counted in TTFT, but their waits are
        record(tree.bob, queued_ms=0, ttft_ms=None, status=429)
    rows = {row.group: row for row in report(DAY, NEXT_DAY, ("user",)).rows}
    alice, bob = rows["alice",], rows["bob",]
    assert (alice.queue_p50_ms, alice.queue_p95_ms) == (500, 950)
    assert (alice.ttft_p50_ms, alice.ttft_p95_ms) == (50, 95)
    assert (bob.queue_p50_ms, bob.queue_p95_ms, bob.ttft_p50_ms, bob.ttft_p95_ms) == (0, 0, None, None)
    assert bob.errors == 30
    total = report(DAY, NEXT_DAY, ("user",)).total
    assert (total.ttft_p50_ms, total.ttft_p95_ms) == (50, 95)  # bob's missing first tokens ignored
    assert total.queue_p50_ms == 350  # 130 waits: the 65th smallest, alice's 35th after bob's 30 zeros
    assert total.queue_p95_ms == 940  # the 124th (ceil(0.95 x 130)): alice's 94th


def test_a_single_record_is_its_own_percentiles(tree):
    record(tree.alice, queued_ms=1234, ttft_ms=77)
    row = report(DAY, NEXT_DAY, ("user",)).rows[0]
    assert (row.queue_p50_ms, row.queue_p95_ms, row.ttft_p50_ms, row.ttft_p95_ms) == (1234, 1234, 77, 77)


def test_the_range_includes_its_first_instant_and_excludes_its_end(tree):
    start = dt.datetime.combine(DAY, dt.time(), dt.UTC)
    end = start + dt.timedelta(days=1)
    record(tree.alice, at=start - dt.timedelta(microseconds=1), prompt=1, completion=0)
    record(tree.alice, at=start, prompt=10, completion=0)
    record(tree.alice, at=end - dt.timedelta(microseconds=1), prompt=100, completion=0)
    record(tree.alice, at=end, prompt=1000, completion=0)
    assert report(DAY, NEXT_DAY, ("user",)).total.prompt_tokens == 110
    assert report(DAY - dt.timedelta(days=1), NEXT_DAY, ("user",)).total.prompt_tokens == 111
    assert report(DAY, NEXT_DAY + dt.timedelta(days=1), ("user",)).total.prompt_tokens == 1110


def test_an_empty_range_has_no_rows_and_zero_totals(tree):
    result = report(DAY, NEXT_DAY, ("account",))
    assert result.rows == []
    assert (result.total.requests, result.total.weighted_tokens, result.total.queue_p50_ms) == (0, 0, None)


@override_settings(GP_FAIRSHARE_WEIGHT_PROMPT=0.5, GP_FAIRSHARE_WEIGHT_COMPLETION=3.0)
def test_weighted_tokens_follow_the_fair_share_weights(tree):
    record(tree.alice, prompt=10, completion=4)
    assert report(DAY, NEXT_DAY, ("user",)).total.weighted_tokens == 17


@pytest.mark.parametrize("text, message", [
    ("", "one or two"), ("account,user,key", "one or two"), ("user,user", "one or two"),
    ("project", "Unknown grouping project"), ("account,fish", "Unknown grouping fish"),
])
def test_a_bad_grouping_is_refused_in_words(text, message):
    with pytest.raises(BadReport, match=message):
        parse_grouping(text)


def test_an_end_not_after_the_start_is_refused(tree):
    with pytest.raises(BadReport, match="end date must come after"):
        report(NEXT_DAY, DAY, ("user",))
    with pytest.raises(BadReport, match="end date must come after"):
        report(DAY, DAY, ("user",))


def test_a_range_with_too_many_records_is_refused_not_read(tree, monkeypatch):
    monkeypatch.setattr(usage_report, "MAX_RECORDS", 3)
    for _ in range(4):
        record(tree.alice)
    with pytest.raises(usage_report.TooManyRecords, match="4 requests, more than the 3"):
        report(DAY, NEXT_DAY, ("user",))


def test_the_account_tree_sums_subtrees_with_users_under_their_account(tree):
    record(tree.alice, prompt=100, completion=0, queued_ms=10)
    record(tree.bob, prompt=10, completion=0, queued_ms=1000)
    record(tree.carol, prompt=1, completion=0)
    result = account_tree(DAY, NEXT_DAY)
    assert [(row.group, row.depth, row.prompt_tokens) for row in result.rows] == [
        (("lab", ""), 0, 110), (("lab", "alice"), 1, 100),
        (("proj", ""), 1, 10), (("proj", "bob"), 2, 10),
        (("other", ""), 0, 1), (("other", "carol"), 1, 1),
    ]
    lab = result.rows[0]
    assert (lab.queue_p50_ms, lab.queue_p95_ms) == (10, 1000)  # over the subtree's own records
    assert result.total.prompt_tokens == 111
    assert [row.group for row in account_tree(DAY, NEXT_DAY, with_users=False).rows] == [
        ("lab", ""), ("proj", ""), ("other", "")]


def test_the_account_tree_leaves_out_accounts_that_used_nothing(tree):
    record(tree.carol)
    assert [row.group for row in account_tree(DAY, NEXT_DAY).rows] == [("other", ""), ("other", "carol")]
