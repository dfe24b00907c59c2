"""vLLM's scoring API as an embedding model serves it (`--runner pooling`): POST /v1/score and
POST /v1/rerank (and /v2/rerank, the same). The query and each document are embedded once
(embeddings.vector) and scored by their cosine similarity, as vLLM scores with a bi-encoder; the
usage counts every text's tokens as prompt, nothing after it.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from typing import Any

from .config import SimConfig
from .embeddings import vector
from .protocol import bad_request, dumps, request_object
from .tokens import count_tokens, encode_text

_ID_PREFIX = os.urandom(4).hex()
_ids = itertools.count(1)
# The pairs a score request may name, as vLLM takes them (its request classes).
_SCORE_PAIRS = (("text_1", "text_2"), ("data_1", "data_2"), ("queries", "documents"), ("queries", "items"))


@dataclass(slots=True)
class ScoringRequest:
    firsts: list[str]  # one per pair: the query (repeated) or the first text
    seconds: list[str]  # one per pair: the document or the second text
    prompt_tokens: int  # every distinct text's tokens
    top_n: int  # rerank: how many results (0: all)
    priority: int
    user: str = ""


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise bad_request(f"'{name}' must be a string or a non-empty list of strings")


def _request(data: dict[str, Any], firsts: list[str], seconds: list[str], config: SimConfig) -> ScoringRequest:
    if len(firsts) == 1:
        firsts = firsts * len(seconds)
    if len(firsts) != len(seconds):
        raise bad_request("Input lengths must be either 1:1, 1:N or N:N")
    distinct = {*firsts, *seconds}
    for text in distinct:
        if count_tokens(encode_text(text)) > config.max_model_len:
            raise bad_request(f"This model's maximum context length is {config.max_model_len} tokens.")
    priority = data.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise bad_request("'priority' must be an integer")
    top_n = data.get("top_n", 0) or 0
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0:
        raise bad_request("'top_n' must be a non-negative integer")
    user = data.get("user")
    return ScoringRequest(firsts, seconds, sum(count_tokens(encode_text(t)) for t in firsts[:1] + seconds),
                          top_n, priority, user if isinstance(user, str) else "")


def parse_rerank(body: bytes, config: SimConfig) -> ScoringRequest:
    data = request_object(body, config)
    query = data.get("query")
    if not isinstance(query, str):
        raise bad_request("'query' must be a string")
    return _request(data, [query], _texts(data.get("documents"), "documents"), config)


def parse_score(body: bytes, config: SimConfig) -> ScoringRequest:
    data = request_object(body, config)
    for first, second in _SCORE_PAIRS:
        if first in data and second in data:
            return _request(data, _texts(data[first], first), _texts(data[second], second), config)
    raise bad_request("A score request names its texts as text_1 and text_2 (or queries and documents)")


def _scores(request: ScoringRequest, size: int) -> list[float]:
    return [sum(a * b for a, b in zip(vector(encode_text(q), size), vector(encode_text(d), size), strict=True))
            for q, d in zip(request.firsts, request.seconds, strict=True)]


def _usage(request: ScoringRequest) -> dict[str, Any]:
    return {"prompt_tokens": request.prompt_tokens, "total_tokens": request.prompt_tokens,
            "completion_tokens": 0, "prompt_tokens_details": None}


def rerank_body(request: ScoringRequest, config: SimConfig) -> bytes:
    scored = sorted(enumerate(_scores(request, config.embedding_size)), key=lambda pair: -pair[1])
    if request.top_n:
        scored = scored[: request.top_n]
    return dumps({
        "id": f"rerank-{_ID_PREFIX}{next(_ids):x}", "model": config.model,
        "usage": {"prompt_tokens": request.prompt_tokens, "total_tokens": request.prompt_tokens},
        "results": [{"index": index, "document": {"text": request.seconds[index]}, "relevance_score": score}
                    for index, score in scored],
    })


def score_body(request: ScoringRequest, config: SimConfig) -> bytes:
    return dumps({
        "id": f"score-{_ID_PREFIX}{next(_ids):x}", "object": "list", "created": int(time.time()),
        "model": config.model,
        "data": [{"index": index, "object": "score", "score": score}
                 for index, score in enumerate(_scores(request, config.embedding_size))],
        "usage": _usage(request),
    })
