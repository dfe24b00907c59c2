"""Who holds a batch: a claim a live runner renews is left alone, a stale one is taken over, and
a result is written only by the runner holding the claim, once."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.batch.line_runner import Answer
from fairness.batch.runner import _claim, _record, _renew_claims
from fairness.models import Batch, BatchLine

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
CLAIM = dt.timedelta(seconds=30)


def batch_held_by(cast, runner: str, seen: dt.datetime | None, name: str) -> Batch:
    batch = Batch.objects.create(
        public_id=name, owner=get_user_model().objects.get(username="carol"), api_key_id=cast["carol"].key_id,
        input_file_public_id="file-x", endpoint="/v1/chat/completions", status="in_progress",
        expires_at=timezone.now() + dt.timedelta(hours=1), runner=runner, runner_seen_at=seen, total=2,
    )
    BatchLine.objects.create(batch=batch, index=0, custom_id="a", state="pending")
    BatchLine.objects.create(batch=batch, index=1, custom_id="b", state="done")
    return batch


def test_a_stale_claim_is_taken_over_and_a_live_one_is_not(cast):
    live = batch_held_by(cast, "live-runner", NOW - dt.timedelta(seconds=5), "batch_live")
    batch_held_by(cast, "dead-runner", NOW - dt.timedelta(seconds=31), "batch_dead")
    batch_held_by(cast, "", None, "batch_free")

    claimed = _claim("me", NOW - CLAIM, NOW, held=set())
    assert {b.public_id for b in claimed} == {"batch_dead", "batch_free"}
    assert set(Batch.objects.filter(runner="me").values_list("public_id", flat=True)) == {"batch_dead", "batch_free"}
    assert Batch.objects.get(pk=live.pk).runner == "live-runner"
    assert _claim("someone-else", NOW - CLAIM, NOW, held=set()) == []  # all held now


def test_a_runner_that_lost_its_claim_learns_it_when_it_renews_and_writes_nothing(cast):
    batch = batch_held_by(cast, "slow-runner", NOW - dt.timedelta(minutes=5), "batch_slow")
    _claim("new-runner", NOW - CLAIM, NOW, held=set())
    assert _renew_claims("slow-runner", {batch.pk}, NOW) == set()
    assert _renew_claims("new-runner", {batch.pk}, NOW) == {batch.pk}

    line = BatchLine.objects.get(batch=batch, index=0)
    _record(batch.pk, line.pk, "slow-runner", Answer(200, '{"old": true}'), "req-old")
    assert BatchLine.objects.get(pk=line.pk).state == "pending"  # the old runner's answer is dropped
    _record(batch.pk, line.pk, "new-runner", Answer(200, '{"new": true}'), "req-new")
    _record(batch.pk, line.pk, "new-runner", Answer(200, '{"again": true}'), "req-again")
    line.refresh_from_db()
    assert (line.state, line.request_id, line.response) == ("done", "req-new", '{"new": true}')
    assert Batch.objects.get(pk=batch.pk).completed == 1
