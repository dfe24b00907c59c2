"""POST /tokenize and /detokenize, and Anthropic's POST /v1/messages/count_tokens, as vLLM serves
them: the key checked, its model's replicas found, its rate limits counted, and the request sent to
one healthy replica of the model. They hold no engine slot and wait in no queue: the engine runs
its tokenizer, not the model, so they cost the card nothing a concurrency cap would guard. A
requests-per-minute limit of the key's tier still counts them; nothing is charged to budgets or
fair share, and no usage record is written.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
from django.http import HttpResponse, HttpResponseBase

from fairness.gateway import engine_client
from fairness.gateway.errors import ApiError
from fairness.gateway.runtime import GatewayRuntime
from fairness.gateway.views import GatewayRequest, engine_error
from fairness.scheduling.admission import RateLimited

TOKENIZE_PATH = "/tokenize"
DETOKENIZE_PATH = "/detokenize"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"  # errors in Anthropic's shape there (anthropic_shape.py)


async def tokenize(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    return await _tokenizer(request, runtime, TOKENIZE_PATH)


async def detokenize(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    return await _tokenizer(request, runtime, DETOKENIZE_PATH)


async def count_tokens(request: GatewayRequest, runtime: GatewayRuntime) -> HttpResponseBase:
    return await _tokenizer(request, runtime, COUNT_TOKENS_PATH)


def _parsed(body: bytes, path: str) -> dict[str, Any]:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ApiError(400, "The request body is not valid JSON.", "invalid_json") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object.", "invalid_json")
    if not isinstance(payload.get("model"), str) or not payload["model"]:
        raise ApiError(400, "You must provide a model parameter.", "missing_required_parameter", param="model")
    if path == TOKENIZE_PATH:
        if not isinstance(payload.get("prompt"), str) and not isinstance(payload.get("messages"), list):
            raise ApiError(400, "Send the text to count as 'prompt' (a string) or 'messages' (a chat).",
                           "missing_required_parameter", param="prompt")
    elif path == COUNT_TOKENS_PATH:
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "messages: must be a non-empty array of message objects.", "invalid_type",
                           param="messages")
    else:
        tokens = payload.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise ApiError(400, "'tokens' must be an array of token ids (integers).", "invalid_type", param="tokens")
    return payload


async def _tokenizer(request: GatewayRequest, runtime: GatewayRuntime, path: str) -> HttpResponseBase:
    if request.method != "POST":
        raise ApiError(405, "Use POST for this endpoint.", "method_not_allowed")
    model = _parsed(request.body, path)["model"]
    key = request.key
    if not request.directory.serving(model):
        raise ApiError(404, f"The model '{model}' does not exist.", "model_not_found", param="model")
    replicas = request.directory.serving(model, key.tier.name)
    refused_by = key.model_access.refused_by(model)
    if not replicas or refused_by is not None:
        raise ApiError(403, f"This key may not use the model '{model}'.", "model_not_allowed", param="model")
    up = [r for r in replicas if runtime.replica_up(r.name)]
    if not up:
        raise ApiError(503, f"No healthy replica serves '{model}' right now.", "no_healthy_replica", retry_after=10)
    try:
        await runtime.admission.count_request(key.rate_limits)
    except RateLimited as exc:
        raise ApiError(429, exc.message, "rate_limited", retry_after=exc.retry_after) from None
    replica = random.choice(up)  # any will do: none holds state for it; spread them
    answer = await engine_client.open_stream(replica, path, request.body, request.request_id)
    if answer.status_code != 200:
        return (await engine_error(answer, replica)).response()
    return HttpResponse(await engine_client.read_whole(answer, replica), content_type="application/json")
