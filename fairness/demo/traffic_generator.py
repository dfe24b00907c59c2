"""Demo traffic: a few people chatting and one batch job, so a newcomer sees the charts move.

Bounded on purpose: a fixed number of simulated users, capped reply lengths, and an optional
duration. It speaks plain OpenAI-compatible HTTP to the gateway (no Django), so it works against
any running portal; `manage.py demo_traffic` is its command line and `manage.py demo` starts it.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

QUESTIONS = (
    "What is continuous batching, in two sentences?",
    "Summarise the idea of a prefix cache.",
    "Suggest a name for a small GPU cluster.",
    "Why does a longer prompt slow down the first token?",
    "Give me three tips for writing a good abstract.",
    "Explain KV cache memory to a first-year student.",
    "What should I check before submitting a batch job?",
    "Translate 'fair share' into French and German.",
)
DOCUMENTS = (
    "Classify the sentiment of each of the following reviews and explain your reasoning.",
    "Extract every person, place and date from the following transcript.",
    "Write a detailed summary of the following section of a lab notebook.",
)


@dataclass(frozen=True)
class TrafficPlan:
    url: str  # the gateway's base URL, without /v1
    model: str
    interactive_keys: tuple[str, ...]  # one chatting user per key
    batch_keys: tuple[str, ...] = ()
    # Requests each batch key keeps submitted: more than its tier's cap, so the job borrows the
    # idle slots and the rest waits in the gateway's queue, where the page shows it.
    batch_concurrency: int = 20
    # The job works, then pauses, so the charts show the card filling and draining, and the
    # capacity fit sees more than one load.
    batch_busy_seconds: float = 180.0
    batch_quiet_seconds: float = 60.0  # 0: never pauses
    chat_max_tokens: int = 200
    batch_max_tokens: int = 800
    think_seconds: tuple[float, float] = (2.0, 8.0)
    turns: tuple[int, int] = (2, 5)  # a conversation's length before the user starts afresh
    seed: int | None = None


@dataclass
class Tally:
    requests: int = 0
    tokens: int = 0
    refused: int = 0  # 429: queue full or waited too long
    failed: int = 0
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        minutes = (time.monotonic() - self.started) / 60
        return (
            f"traffic: {self.requests} requests, {self.tokens:,} tokens, {self.refused} refused, "
            f"{self.failed} failed in {minutes:.1f} min"
        )


async def run(
    plan: TrafficPlan,
    duration: float | None = None,
    report: Callable[[str], None] | None = None,
    report_every: float = 30.0,
) -> Tally:
    """Generate traffic until `duration` seconds pass or the task is cancelled (Ctrl-C)."""
    rng = random.Random(plan.seed)
    tally = Tally()
    # Batch requests may wait in the gateway's queue for minutes: that is the point of the tier.
    timeout = httpx.Timeout(10.0, read=900.0)
    users = len(plan.interactive_keys) + len(plan.batch_keys) * plan.batch_concurrency
    if users < 1:
        raise ValueError("Demo traffic needs at least one interactive or batch key.")
    limits = httpx.Limits(max_connections=users)
    base_url = plan.url.rstrip("/")
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as client:
        workers = [
            chat_user(client, plan, key, random.Random(rng.random()), tally)
            for key in plan.interactive_keys
        ] + [
            batch_worker(client, plan, key, random.Random(rng.random()), tally)
            for key in plan.batch_keys for _ in range(plan.batch_concurrency)
        ]
        if report is not None:
            workers.append(_reporter(tally, report, report_every))
        tasks = [asyncio.create_task(w) for w in workers]
        try:
            done, _ = await asyncio.wait(
                tasks, timeout=duration, return_when=asyncio.FIRST_EXCEPTION
            )
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        task.result()  # a worker's bug surfaces here instead of the traffic silently thinning out
    return tally


async def chat_user(
    client: httpx.AsyncClient, plan: TrafficPlan, key: str, rng: random.Random, tally: Tally
) -> None:
    """Someone at a keyboard: short streamed replies, time to read each, a new chat now and then."""
    await asyncio.sleep(rng.uniform(0, plan.think_seconds[1]))  # people do not all start at once
    while True:
        session = uuid.uuid4().hex
        messages: list[dict[str, str]] = []
        for _ in range(rng.randint(*plan.turns)):
            messages.append({"role": "user", "content": rng.choice(QUESTIONS)})
            body = {
                "model": plan.model, "messages": messages, "stream": True,
                "max_tokens": rng.randint(max(1, plan.chat_max_tokens // 4), plan.chat_max_tokens),
            }
            reply = await _chat(client, key, body, tally, session)
            if reply is None:
                messages.pop()  # not answered: the next turn asks afresh
            else:
                messages.append({"role": "assistant", "content": reply})
            await asyncio.sleep(rng.uniform(*plan.think_seconds))


async def batch_worker(
    client: httpx.AsyncClient, plan: TrafficPlan, key: str, rng: random.Random, tally: Tally
) -> None:
    """One lane of a batch job: long non-streamed requests back to back, in shifts."""
    while True:
        await _shift(plan, tally.started)
        document = " ".join(rng.choice(QUESTIONS) for _ in range(rng.randint(5, 20)))
        body = {
            "model": plan.model, "stream": False,
            "messages": [{"role": "user", "content": f"{rng.choice(DOCUMENTS)}\n\n{document}"}],
            "max_tokens": plan.batch_max_tokens,
            # Long replies whatever the prompt: a batch job is the load the page should show.
            "min_tokens": plan.batch_max_tokens // 2,
        }
        await _chat(client, key, body, tally)


async def _shift(plan: TrafficPlan, started: float) -> None:
    """Sleeps through the batch job's quiet part of the cycle; every lane shares the clock."""
    if plan.batch_quiet_seconds <= 0:
        return
    into = (time.monotonic() - started) % (plan.batch_busy_seconds + plan.batch_quiet_seconds)
    if into >= plan.batch_busy_seconds:
        await asyncio.sleep(plan.batch_busy_seconds + plan.batch_quiet_seconds - into)


async def _chat(
    client: httpx.AsyncClient, key: str, body: dict[str, Any], tally: Tally, session: str | None = None
) -> str | None:
    """One request; returns the reply text, or None after backing off from a refusal or failure."""
    headers = {"Authorization": f"Bearer {key}"}
    if session:
        headers["X-Session-ID"] = session
    try:
        async with client.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers
        ) as response:
            if response.status_code == 429:
                tally.refused += 1
                await asyncio.sleep(min(30.0, float(response.headers.get("retry-after", "5"))))
                return None
            if response.status_code != 200:
                tally.failed += 1
                await asyncio.sleep(5.0)
                return None
            if body.get("stream"):
                reply = await _read_stream(response, tally)
            else:
                data = json.loads(await response.aread())
                tally.tokens += data.get("usage", {}).get("completion_tokens", 0)
                reply = data["choices"][0]["message"]["content"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError):
        tally.failed += 1
        await asyncio.sleep(5.0)  # the portal restarting, say: try again shortly
        return None
    tally.requests += 1
    return reply


async def _read_stream(response: httpx.Response, tally: Tally) -> str:
    parts = []
    async for line in response.aiter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:]).get("choices", []):
            content = (choice.get("delta") or {}).get("content")
            if content:
                parts.append(content)
                tally.tokens += 1  # one chunk per token, as vLLM streams
    return "".join(parts)


async def _reporter(tally: Tally, report: Callable[[str], None], every: float) -> None:
    while True:
        await asyncio.sleep(every)
        report(tally.line())
