"""Batches under faults, with real processes: a runner SIGKILLed mid-batch and another taking
over, a cancel mid-run, a window that ends, a key revoked. Ground truth for "no line ran twice to
completion" is the engine's own request log (each line names its custom_id as `user`)."""

from __future__ import annotations

import collections
import datetime as dt
import json
import re
import time
from collections.abc import Iterator

import pytest
from django.utils import timezone

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import ApiKey, Batch, Replica
from tests.support.batches import output_lines, wait_for_status
from tests.support.polling import wait_for

ENDED = {"completed", "failed", "expired", "cancelled"}


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[EngineSimProcess]:
    """An engine at real speed: a line of 150 tokens takes about 1.5 s, so lines are in flight."""
    process = start_enginesim(model="slow", max_num_seqs=8)
    yield process
    process.stop()


@pytest.fixture
def slow_client(slow_sim, gateway, openai_for, cast):
    slow_sim.reset_peak()
    Replica.objects.create(name="slow-a", base_url=slow_sim.url, model="slow", max_num_seqs=8)
    return openai_for(cast["carol"])


def slow_lines(count: int, max_tokens: int = 150) -> bytes:
    return b"".join(
        json.dumps({"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": "slow", "max_tokens": max_tokens, "ignore_eos": True, "user": f"line-{n}",
                             "messages": [{"role": "user", "content": f"line {n}"}]}}).encode() + b"\n"
        for n in range(count)
    )


def start_batch(client, lines: bytes):
    uploaded = client.files.create(file=("in.jsonl", lines), purpose="batch")
    return client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")


def mid_generation(sim: EngineSimProcess) -> bool:
    """Lines run at the engine, each started 0.2 to 1 s ago (a line takes about 1.7 s)."""
    ages = [time.monotonic() - r["arrived"] for r in sim.requests() if r["ended"] is None]
    return bool(ages) and min(ages) >= 0.2 and max(ages) <= 1.0


def finished_at_engine(sim: EngineSimProcess) -> collections.Counter[str]:
    """How many times each batch line finished at the engine."""
    return collections.Counter(r["user"] for r in sim.requests()
                               if r["outcome"] in ("length", "stop") and (r["user"] or "").startswith("line-"))


def test_a_runner_killed_mid_batch_is_taken_over_and_no_line_completes_twice(slow_client, slow_sim, start_runner):
    batch = start_batch(slow_client, slow_lines(40))
    first = start_runner()
    # Killed while every line at the engine is well into its generation and far from its end: the
    # moment that tests taking over. (Killed in the milliseconds between an engine's answer and
    # its record, a line would run again: see docs/batches.md.)
    wait_for(lambda: slow_client.batches.retrieve(batch.id).request_counts.completed >= 4, timeout=60,
             interval=0.1, what="some lines done")

    def between_records() -> bool:
        # Every line the engine has finished is recorded (on a loaded box a record can lag its
        # answer by more than the 0.2 s mid_generation leaves), and none is about to finish.
        if not mid_generation(slow_sim):  # first: from here on, no line finishes for 0.7 s
            return False
        finished = sum(finished_at_engine(slow_sim).values())
        return slow_client.batches.retrieve(batch.id).request_counts.completed == finished

    wait_for(between_records, timeout=20, interval=0.02, what="lines mid-generation, every finished one recorded")
    first.kill()
    wait_for(lambda: slow_sim.stats()["running"] == 0, timeout=10, what="the dead runner's requests aborted")
    aborted = sum(1 for r in slow_sim.requests() if r["outcome"] == "abort")
    assert aborted >= 1, "the kill cut no line short: it tested nothing"
    start_runner()

    done = wait_for_status(slow_client, batch.id, ENDED, timeout=120)
    assert done.status == "completed", done
    assert (done.request_counts.completed, done.request_counts.failed) == (40, 0)
    results = output_lines(slow_client, done.output_file_id)
    assert sorted(r["custom_id"] for r in results) == sorted(f"line-{n}" for n in range(40))
    finished = finished_at_engine(slow_sim)
    assert set(finished) == {f"line-{n}" for n in range(40)}
    assert max(finished.values()) == 1, [line for line, times in finished.items() if times > 1]


def test_cancel_mid_run_aborts_what_runs_starts_nothing_and_keeps_what_finished(slow_client, slow_sim, runner):
    batch = start_batch(slow_client, slow_lines(60))
    wait_for(lambda: slow_client.batches.retrieve(batch.id).request_counts.completed >= 3, timeout=60,
             interval=0.1, what="some lines done")

    cancelling = slow_client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = wait_for_status(slow_client, batch.id, ENDED, timeout=30)
    assert done.status == "cancelled" and done.cancelled_at >= done.cancelling_at
    started = len(slow_sim.requests())
    completed = done.request_counts.completed
    assert 3 <= completed < 60
    assert len(output_lines(slow_client, done.output_file_id)) == completed
    assert sum(finished_at_engine(slow_sim).values()) == completed  # the rest were aborted, not finished
    wait_for(lambda: slow_sim.stats()["running"] == 0, timeout=10, what="nothing left running")
    assert len(slow_sim.requests()) == started  # and nothing new started after
    # Cancelling twice is no error; an ended batch stays as it is.
    assert slow_client.batches.cancel(batch.id).status == "cancelled"


def test_a_batch_whose_window_ends_expires_with_what_it_finished(slow_client, slow_sim, runner):
    batch = start_batch(slow_client, slow_lines(60))
    wait_for(lambda: slow_client.batches.retrieve(batch.id).request_counts.completed >= 3, timeout=60,
             interval=0.1, what="some lines done")
    Batch.objects.filter(public_id=batch.id).update(expires_at=timezone.now() - dt.timedelta(seconds=1))

    done = wait_for_status(slow_client, batch.id, ENDED, timeout=30)
    assert done.status == "expired" and done.expired_at
    counts = done.request_counts
    assert counts.completed >= 3 and counts.completed + counts.failed == 60
    assert len(output_lines(slow_client, done.output_file_id)) == counts.completed
    errors = output_lines(slow_client, done.error_file_id)
    assert len(errors) == counts.failed and {e["error"]["code"] for e in errors} == {"batch_expired"}


def test_a_revoked_key_stops_its_batch(slow_client, slow_sim, runner, cast):
    batch = start_batch(slow_client, slow_lines(60))
    wait_for(lambda: slow_client.batches.retrieve(batch.id).request_counts.completed >= 1, timeout=60,
             interval=0.1, what="a line done")
    ApiKey.objects.filter(pk=cast["carol"].key_id).update(revoked_at=timezone.now())

    done = Batch.objects.get(public_id=batch.id)
    done = wait_for(lambda: (b := Batch.objects.get(public_id=batch.id)).finished and b, timeout=30, interval=0.2,
                    what="the batch to end")
    assert done.status == "failed"
    assert done.errors["data"][0]["code"] == "revoked_api_key"
    assert done.completed >= 1 and done.completed + done.failed == 60


def test_a_batch_longer_than_a_slice_goes_on_in_the_next_without_aborting_a_line(slow_client, slow_sim,
                                                                                 start_runner):
    runner = start_runner(GP_BATCH_SLICE_SECONDS="3")
    batch = start_batch(slow_client, slow_lines(32))  # about 6 s of work, slices of 3 s

    done = wait_for_status(slow_client, batch.id, ENDED, timeout=120)
    assert done.status == "completed" and done.request_counts.completed == 32
    outcomes = collections.Counter(r["outcome"] for r in slow_sim.requests())
    assert outcomes == {"length": 32}, outcomes  # a slice's end gave back only lines not yet running
    def slices() -> int:  # runners that held it; the last logs its end just after the batch ends
        return len(re.findall(r"run_batches\[[\w-]+\] succeeded in [\d.]+s: [1-9]", runner.log_path.read_text()))

    wait_for(lambda: slices() >= 2, timeout=15, what="a second slice")  # it did take more than one


def test_a_batch_fills_every_slot_and_gives_one_back_at_once_for_a_chat(slow_client, slow_sim, runner,
                                                                        openai_for, cast):
    batch = start_batch(slow_client, slow_lines(24))
    # Its lines may borrow the reserve too (they can run again later): every slot, as nobody chats.
    wait_for(lambda: slow_sim.stats()["running"] == 8, timeout=60, interval=0.05, what="the batch on 8 of 8 slots")

    chat = openai_for(cast["alice"]).chat.completions.with_raw_response.create(
        model="slow", max_tokens=4, messages=[{"role": "user", "content": "hello"}]
    )
    # A line runs 1.7 s: waiting for one to end would show here. The newest line was asked back
    # for the chat, and one more, so that the next chat finds a spare slot at once.
    assert int(chat.headers["X-GPUPortal-Queued-Ms"]) < 150
    assert chat.parse().choices[0].message.content
    wait_for(lambda: any(r["outcome"] == "abort" and (r["user"] or "").startswith("line-")
                         for r in slow_sim.requests()), timeout=10, what="a line given back")

    done = wait_for_status(slow_client, batch.id, ENDED, timeout=120)
    assert done.status == "completed" and done.request_counts.completed == 24
    finished = finished_at_engine(slow_sim)
    assert set(finished) == {f"line-{n}" for n in range(24)} and max(finished.values()) == 1
