"""The relay's bookkeeping, with the outbound seam mocked: counts, dropped usage chunks, cleanup."""

import httpx

from fairness.gateway import sse_relay as relay_module
from fairness.gateway.sse_relay import Relay
from tests.support.polling import async_wait_for

EVENTS = (
    b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)


async def upstream_response(events: bytes = EVENTS) -> httpx.Response:
    async def stream():
        yield events

    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=stream()))
    client = httpx.AsyncClient(transport=transport)
    return await client.send(client.build_request("POST", "http://engine.invalid/v1/chat/completions"), stream=True)


async def test_it_passes_events_through_counts_them_and_drops_the_usage_it_asked_for():
    done = []

    async def on_done(tally):
        done.append(tally)

    relay = Relay(await upstream_response(), strip_usage=True, on_done=on_done, replica_name="r")
    body = b"".join([chunk async for chunk in relay])
    assert b'"usage"' not in body and body.endswith(b"data: [DONE]\n\n")
    tally = done[0]
    assert (tally.prompt_tokens, tally.completion_tokens, tally.finished) == (7, 2, True)


async def test_an_event_nested_past_the_parsers_depth_is_passed_on_not_raised():
    done = []

    async def on_done(tally):
        done.append(tally)

    deep = b"data: {\"usage\": " + b"[" * 100_000 + b"]" * 100_000 + b"}\n\n"
    relay = Relay(await upstream_response(deep + EVENTS), strip_usage=True, on_done=on_done, replica_name="r")
    body = b"".join([chunk async for chunk in relay])
    assert body.startswith(deep) and body.endswith(b"data: [DONE]\n\n")
    assert (done[0].prompt_tokens, done[0].completion_tokens) == (7, 2)


async def test_a_response_django_never_starts_is_cleaned_up_anyway(monkeypatch):
    monkeypatch.setattr(relay_module, "UNSTARTED_GRACE_SECONDS", 0.05)
    done = []

    async def on_done(tally):
        done.append(tally)

    Relay(await upstream_response(), strip_usage=True, on_done=on_done, replica_name="r")

    async def cleaned() -> bool:
        return bool(done)

    await async_wait_for(cleaned, timeout=5, what="the unstarted relay to give everything back")
    assert not done[0].finished
