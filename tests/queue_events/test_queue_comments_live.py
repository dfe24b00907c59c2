"""A streamed request that waits is told its place: with real processes (gateway, enginesim,
Redis), ten streams queued behind a full engine each read `: queued position=N eta_ms=M` comments
whose position falls to 0 before their first token, and the official SDKs read such streams
unchanged. A request granted at once sends no extra byte; a tier with queue events off sends
none while it waits; a stream whose request times out in the queue ends with an error event."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field

import httpx

from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.cast import MODEL
from tests.support.engine_fill import fill_the_engine, free_the_engine
from tests.support.polling import wait_for
from tests.support.v1_calls import CHAT

COMMENT = re.compile(rb"^: queued position=(\d+)(?: eta_ms=(\d+))?$")


@dataclass
class Reader:
    """One streamed chat read line by line in a thread of its own."""

    positions: list[int] = field(default_factory=list)
    estimates: list[int | None] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)
    first_data_after: int | None = None  # how many queue comments came before the first data line
    status: int = 0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def read(self, url: str, secret: str, body: dict, headers: dict[str, str] | None = None) -> None:
        try:
            with httpx.stream("POST", url, json=body, timeout=60,
                              headers={"authorization": f"Bearer {secret}", **(headers or {})}) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    raw = line.encode()
                    if not raw:
                        continue  # the blank line that ends each event
                    self.lines.append(raw)
                    found = COMMENT.match(raw)
                    if found:
                        self.positions.append(int(found.group(1)))
                        self.estimates.append(int(found.group(2)) if found.group(2) else None)
                    elif raw.startswith(b"data:") and self.first_data_after is None:
                        self.first_data_after = len(self.positions)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.done.set()


def start_reader(url: str, secret: str, body: dict, headers: dict[str, str] | None = None) -> Reader:
    reader = Reader()
    threading.Thread(target=reader.read, args=(url, secret, body, headers), daemon=True).start()
    return reader


STREAM = CHAT | {"stream": True, "max_tokens": 8}


def test_ten_queued_streams_see_their_place_fall_to_zero_before_their_first_token(gateway, sim, two_slots, lab):
    user, tier, secret = lab
    held = fill_the_engine(gateway, sim, secret, user, tier.name)
    url = gateway.url + "/v1/chat/completions"
    readers = []
    try:
        for n in range(1, 11):
            readers.append(start_reader(url, secret, STREAM))
            wait_for(lambda n=n: person_load(redis_sync()).get((user.pk, tier.name), (0, 0))[1] == n,
                     what="the stream queued")  # one at a time: their places are their arrival order
        wait_for(lambda: all(r.positions for r in readers), timeout=15, what="every stream told its place")
        # While the engine is full, the ten places are the ten arrivals, in order.
        assert [r.positions[0] for r in readers] == list(range(10))
        assert all(e is not None for r in readers for e in r.estimates)
    finally:
        free_the_engine(sim, held)
    for reader in readers:
        assert reader.done.wait(30), "a stream did not end"
    for i, reader in enumerate(readers):
        assert reader.error is None and reader.status == 200
        seen = reader.positions[: reader.first_data_after]
        assert seen == sorted(seen, reverse=True), f"stream {i}: its place went back: {seen}"
        assert seen[-1] == 0, f"stream {i}: the first token came before place 0: {seen}"
        assert reader.lines[-1] == b"data: [DONE]"
        assert not any(COMMENT.match(line) for line in reader.lines[reader.lines.index(next(
            line for line in reader.lines if line.startswith(b"data:"))):])  # no comment once the answer runs


def test_the_official_sdks_read_a_queued_stream_unchanged(gateway, sim, two_slots, lab):
    from anthropic import Anthropic
    from openai import OpenAI

    user, tier, secret = lab
    held = fill_the_engine(gateway, sim, secret, user, tier.name)
    results: dict[str, str] = {}

    def openai_stream() -> None:
        client = OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
        chunks = client.chat.completions.create(model=MODEL, messages=CHAT["messages"], max_tokens=8, stream=True)
        results["openai"] = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    def anthropic_stream() -> None:
        client = Anthropic(base_url=gateway.url, api_key=secret, max_retries=0)
        with client.messages.stream(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]) as s:
            results["anthropic"] = "".join(s.text_stream)

    threads = [threading.Thread(target=f, daemon=True) for f in (openai_stream, anthropic_stream)]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: person_load(redis_sync()).get((user.pk, tier.name), (0, 0))[1] == 2, what="both queued")
        # A stream read raw, queued after them: once it is told its place, so were they.
        witness = start_reader(gateway.url + "/v1/chat/completions", secret, STREAM)
        wait_for(lambda: witness.positions, timeout=10, what="the witness told its place")
        assert witness.positions[0] == 2
    finally:
        free_the_engine(sim, held)
    for thread in threads:
        thread.join(30)
    assert results.get("openai") and results.get("anthropic"), results


def test_a_stream_granted_at_once_sends_no_extra_byte(gateway, two_slots, lab):
    _, _, secret = lab
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=STREAM, timeout=30,
                      headers={"authorization": f"Bearer {secret}"}) as response:
        body = b"".join(response.iter_raw())
    assert body.startswith(b"data:") and b": queued" not in body


def test_a_tier_with_queue_events_off_sends_nothing_while_it_waits(gateway, sim, two_slots, lab):
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.models import Tier

    user, tier, secret = lab
    quiet_tier = Tier.objects.create(name="quiet", per_key_concurrency=2, queue_events=False)
    _, quiet_secret = issue_key(get_user_model().objects.create(username="quinn"), quiet_tier, label="q")
    held = fill_the_engine(gateway, sim, secret, user, tier.name)
    url = gateway.url + "/v1/chat/completions"
    try:
        quiet = start_reader(url, quiet_secret, STREAM)
        wait_for(lambda: sum(q for (_, t), (_, q) in person_load(redis_sync()).items() if t == "quiet") == 1,
                 what="the quiet tier's stream queued")
        told = start_reader(url, secret, STREAM)  # queued after it, in a tier with queue events on
        wait_for(lambda: told.positions, timeout=10, what="the other stream told its place")
        assert quiet.status == 0 and not quiet.lines  # not even the response's start
    finally:
        free_the_engine(sim, held)
    assert quiet.done.wait(30) and quiet.status == 200 and not quiet.positions
    assert told.done.wait(30) and told.status == 200


def test_a_stream_that_times_out_in_the_queue_ends_with_an_error_event(gateway, sim, two_slots, lab):
    user, tier, secret = lab
    held = fill_the_engine(gateway, sim, secret, user, tier.name)
    try:
        reader = start_reader(gateway.url + "/v1/chat/completions", secret, STREAM,
                              headers={"X-GPUPortal-Max-Queue-Ms": "2500"})
        assert reader.done.wait(30)
    finally:
        free_the_engine(sim, held)
    assert reader.status == 200 and reader.positions  # its stream had started
    data = [line for line in reader.lines if line.startswith(b"data:")]
    assert json.loads(data[0][5:])["error"]["code"] == "queue_timeout"
    assert data[-1] == b"data: [DONE]"
    assert person_load(redis_sync()).get((user.pk, tier.name), (0, 0))[1] == 0  # it left the queue
