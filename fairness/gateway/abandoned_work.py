"""What a request whose client left is charged: the work the engine did for it.

The engine's usage counts come at the end of an answer, so a client that leaves early takes them
with it, yet the engine has already run the whole prefill. The prompt is then counted after the
abort, in the accounting step (never before forwarding, so no request waits for it): by the
replica itself (vLLM's /tokenize) when it answers, else estimated from the body's size at the
bytes-per-token ratio this process measured on its own completed requests. The usage record says
which (`prompt_count_source`), and how the completion tokens were counted
(`completion_count_source`).

A whole answer abandoned before it came shows nothing of its progress, yet the engine decoded
for it all the while it held its slot: it is charged what this process measured the engine does
in that time (DecodeCalibration), recorded as completion source "estimate".
"""

from __future__ import annotations

from typing import Any, Literal

from fairness.gateway import engine_client, request_parsing
from fairness.scheduling.directory import ReplicaInfo

# "prompt_ids": a completions prompt given as token ids, which counts itself.
PromptSource = Literal["engine", "tokenize", "estimate", "prompt_ids"]
# "engine": its usage counts; "events": content events relayed before the abort; "estimate": a
# whole answer abandoned before it came, charged the engine's measured pace over the time it held
# its slot; "unknown": an answer that failed without counts (charged 0).
CompletionSource = Literal["engine", "events", "estimate", "unknown"]

# Before any request completed here: about four bytes of request body per prompt token, what
# BPE tokenizers give on English text (JSON framing adds a little, so it errs towards less).
DEFAULT_BYTES_PER_TOKEN = 4.0
TOKENIZE_TIMEOUT_SECONDS = 2.0


class PromptCalibration:
    """Bytes of request body per prompt token, over this process's completed requests.

    Sums, not an average of ratios: a long prompt (where the JSON framing is a small part) weighs
    more than a short one, and it is long prompts whose estimate matters."""

    def __init__(self, default: float = DEFAULT_BYTES_PER_TOKEN) -> None:
        self.default = default
        self.body_bytes = 0
        self.prompt_tokens = 0

    def observe(self, body_bytes: int, prompt_tokens: int) -> None:
        """A completed request's body size and the prompt tokens its engine counted."""
        if body_bytes > 0 and prompt_tokens > 0:
            self.body_bytes += body_bytes
            self.prompt_tokens += prompt_tokens

    @property
    def bytes_per_token(self) -> float:
        return self.body_bytes / self.prompt_tokens if self.prompt_tokens else self.default

    def estimate(self, body_bytes: int) -> int:
        return max(1, round(body_bytes / self.bytes_per_token)) if body_bytes > 0 else 0


calibration = PromptCalibration()  # one per gateway process, as its completed requests are

# Before any request completed here: a first token after one second, then ten tokens a second. A
# 7-8B model on one card decodes 30-60 tokens a second for a sequence alone and 10-20 in a full
# batch, and a first token takes a fraction of a second to a few under load: both figures err
# towards charging less, as the prompt's default does.
DEFAULT_TOKENS_PER_SECOND = 10.0
DEFAULT_FIRST_TOKEN_SECONDS = 1.0
# The engine's pace follows its load (a full batch decodes each sequence slower than one alone),
# so recent requests weigh more: each new one keeps this share of the figures before it (about
# the last hundred requests count).
DECODE_MEMORY = 0.99
# An answer shorter than this measures the engine's overheads more than its pace.
MIN_DECODE_TOKENS = 4


class DecodeCalibration:
    """The engine's time to a first token and its decode pace after it, over this process's
    completed requests, in seconds measured from sending a request to the engine.

    Sums, as PromptCalibration's, so a long answer weighs more than a short one; but decaying
    sums (DECODE_MEMORY), since the pace changes with the engine's load as a ratio of body bytes
    to tokens does not."""

    def __init__(
        self, tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND,
        first_token_seconds: float = DEFAULT_FIRST_TOKEN_SECONDS, memory: float = DECODE_MEMORY,
    ) -> None:
        self.default_pace = tokens_per_second
        self.default_first_token = first_token_seconds
        self.memory = memory
        self.tokens = 0.0
        self.decode_seconds = 0.0
        self.first_token_total = 0.0
        self.first_token_weight = 0.0

    def observe(self, completion_tokens: int, seconds: float, first_token_seconds: float | None = None) -> None:
        """A completed request: the completion tokens its engine counted, the seconds from sending
        it to the end of its answer, and those to its first token when it streamed. A whole answer
        comes at once: its decode took what remains after the measured time to a first token."""
        if first_token_seconds is not None and 0.0 <= first_token_seconds <= seconds:
            self.first_token_total = self.first_token_total * self.memory + first_token_seconds
            self.first_token_weight = self.first_token_weight * self.memory + 1.0
            decode = seconds - first_token_seconds
        else:
            decode = seconds - self.first_token_seconds
        if completion_tokens >= MIN_DECODE_TOKENS and decode > 0.0:
            self.tokens = self.tokens * self.memory + completion_tokens
            self.decode_seconds = self.decode_seconds * self.memory + decode

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.decode_seconds if self.decode_seconds else self.default_pace

    @property
    def first_token_seconds(self) -> float:
        if not self.first_token_weight:
            return self.default_first_token
        return self.first_token_total / self.first_token_weight

    def estimate(self, held_seconds: float, limit: int) -> int:
        """The completion tokens an engine decoded for a request that held its slot this long,
        at most the request's completion limit."""
        decoding = max(0.0, held_seconds - self.first_token_seconds)
        return max(0, min(limit, round(self.tokens_per_second * decoding)))


decode_pace = DecodeCalibration()  # one per gateway process, as `calibration`


def tokenize_body(endpoint: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The /tokenize request that counts this request's prompt as the engine counted it, or None
    when the prompt is not one /tokenize takes."""
    model = payload.get("model")
    if endpoint == request_parsing.EMBEDDINGS:
        text = payload.get("input")
        if isinstance(text, list) and len(text) == 1:
            text = text[0]
        return {"model": model, "prompt": text} if isinstance(text, str) else None  # several: estimated
    if endpoint == request_parsing.CHAT:
        messages = payload.get("messages")
        if not isinstance(messages, list):
            return None
        body: dict[str, Any] = {"model": model, "messages": messages, "add_generation_prompt": True}
        for name in ("tools", "chat_template_kwargs"):  # they change the rendered prompt
            if payload.get(name) is not None:
                body[name] = payload[name]
        return body
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    return {"model": model, "prompt": prompt} if isinstance(prompt, str) else None


def _token_ids(endpoint: str, payload: dict[str, Any]) -> int | None:
    """A prompt given as token ids counts itself: a completions prompt, or embeddings' inputs."""
    if endpoint == request_parsing.EMBEDDINGS:
        inputs = payload.get("input")
        if isinstance(inputs, list) and inputs and _ids(inputs):
            return len(inputs)
        if isinstance(inputs, list) and inputs and all(isinstance(i, list) and _ids(i) for i in inputs):
            return sum(len(i) for i in inputs)
        return None
    prompt = payload.get("prompt")
    return len(prompt) if isinstance(prompt, list) and _ids(prompt) else None


def _ids(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, int) and not isinstance(i, bool) for i in items)


async def count_prompt(
    replica: ReplicaInfo,
    endpoint: str,
    payload: dict[str, Any],
    body_bytes: int,
    estimate: PromptCalibration = calibration,
    timeout: float = TOKENIZE_TIMEOUT_SECONDS,
) -> tuple[int, PromptSource]:
    """The prompt tokens the replica prefilled for this request, and where the count came from."""
    ids = _token_ids(endpoint, payload)
    if ids is not None:
        return ids, "prompt_ids"
    body = tokenize_body(endpoint, payload)
    if body is not None:
        counted = await engine_client.tokenize(replica, body, timeout)
        if counted is not None:
            return counted, "tokenize"
    return estimate.estimate(body_bytes), "estimate"
