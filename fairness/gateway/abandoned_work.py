"""What a request whose client left is charged: the work the engine did for it.

The engine's usage counts come at the end of an answer, so a client that leaves early takes them
with it, yet the engine has already run the whole prefill. The prompt is then counted after the
abort, in the accounting step (never before forwarding, so no request waits for it): by the
replica itself (vLLM's /tokenize) when it answers, else estimated from the body's size at the
bytes-per-token ratio this process measured on its own completed requests. The usage record says
which (`prompt_count_source`), and how the completion tokens were counted
(`completion_count_source`).
"""

from __future__ import annotations

from typing import Any, Literal

from fairness.gateway import engine_client, request_parsing
from fairness.scheduling.directory import ReplicaInfo

# "prompt_ids": a completions prompt given as token ids, which counts itself.
PromptSource = Literal["engine", "tokenize", "estimate", "prompt_ids"]
# "engine": its usage counts; "events": content events relayed before the abort; "unknown": a
# whole answer abandoned before it came, whose progress the gateway cannot see (charged 0).
CompletionSource = Literal["engine", "events", "unknown"]

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


def tokenize_body(endpoint: str, payload: dict[str, Any]) -> dict[str, Any] | None:
    """The /tokenize request that counts this request's prompt as the engine counted it, or None
    when the prompt is not one /tokenize takes."""
    model = payload.get("model")
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


def _token_ids(payload: dict[str, Any]) -> int | None:
    """A completions prompt given as token ids counts itself."""
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        return len(prompt)
    return None


async def count_prompt(
    replica: ReplicaInfo,
    endpoint: str,
    payload: dict[str, Any],
    body_bytes: int,
    estimate: PromptCalibration = calibration,
    timeout: float = TOKENIZE_TIMEOUT_SECONDS,
) -> tuple[int, PromptSource]:
    """The prompt tokens the replica prefilled for this request, and where the count came from."""
    ids = _token_ids(payload)
    if ids is not None:
        return ids, "prompt_ids"
    body = tokenize_body(endpoint, payload)
    if body is not None:
        counted = await engine_client.tokenize(replica, body, timeout)
        if counted is not None:
            return counted, "tokenize"
    return estimate.estimate(body_bytes), "estimate"
