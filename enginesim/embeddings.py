"""vLLM's POST /v1/embeddings, as a pooling model (`--runner pooling`) serves it.

Each input is counted as a prompt is (tokens.py) and gets a unit vector of `--embedding-size`
floats (or fewer, with `dimensions`) that is a pure function of its text, so equal inputs embed
equally. The usage counts prompt tokens only: an embedding is a prefill and nothing after it.
"""

from __future__ import annotations

import array
import base64
import hashlib
import itertools
import math
import os
import time
from dataclasses import dataclass
from typing import Any

from .config import SimConfig
from .protocol import bad_request, dumps, request_object
from .tokens import count_tokens, encode_ids, encode_text

_ID_PREFIX = os.urandom(4).hex()
_ids = itertools.count(1)


@dataclass(slots=True)
class EmbeddingRequest:
    inputs: list[bytes]  # each input as token units
    prompt_tokens: int
    dimensions: int
    base64: bool
    priority: int
    user: str = ""


def parse_embedding(body: bytes, config: SimConfig) -> EmbeddingRequest:
    """Validate an embeddings body the way vLLM does; raises ApiError."""
    data = request_object(body, config)
    raw = data.get("input")
    if isinstance(raw, str) or (isinstance(raw, list) and raw and _token_ids(raw)):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise bad_request("'input' must be a string, a list of strings or token ids, or a list of token-id lists")
    inputs = []
    for item in raw:
        if isinstance(item, str):
            inputs.append(encode_text(item))
        elif isinstance(item, list) and _token_ids(item):
            inputs.append(encode_ids(item))
        else:
            raise bad_request("each input must be a string or a list of token ids")
    for units in inputs:
        if count_tokens(units) > config.max_model_len:
            raise bad_request(
                f"This model's maximum context length is {config.max_model_len} tokens. However, you "
                f"requested {count_tokens(units)} tokens in the input for embedding generation. Please "
                "reduce the length of the input.")
    dimensions = data.get("dimensions")
    if dimensions is not None:
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise bad_request("'dimensions' must be a positive integer")
        if dimensions > config.embedding_size:
            raise bad_request(f"Dimensions {dimensions} is more than the model's {config.embedding_size}")
    encoding = data.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise bad_request("'encoding_format' must be 'float' or 'base64'")
    priority = data.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise bad_request("'priority' must be an integer")
    user = data.get("user")
    return EmbeddingRequest(inputs, sum(count_tokens(u) for u in inputs), dimensions or config.embedding_size,
                            encoding == "base64", priority, user if isinstance(user, str) else "")


def _token_ids(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items)


def vector(units: bytes, size: int) -> list[float]:
    """A unit vector of `size` floats drawn from the input's hash."""
    stream = b""
    counter = 0
    while len(stream) < 4 * size:
        stream += hashlib.blake2b(units, digest_size=64, person=counter.to_bytes(16, "little")).digest()
        counter += 1
    raw = [v / 2**32 - 0.5 for v in array.array("I", stream[: 4 * size])]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return [v / norm for v in raw]


def embedding_body(request: EmbeddingRequest, model: str) -> bytes:
    """vLLM's embeddings response."""
    data = []
    for index, units in enumerate(request.inputs):
        values = vector(units, request.dimensions)
        embedding: Any = values
        if request.base64:
            embedding = base64.b64encode(array.array("f", values).tobytes()).decode()
        data.append({"index": index, "object": "embedding", "embedding": embedding})
    return dumps({
        "id": f"embd-{_ID_PREFIX}{next(_ids):x}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": {"prompt_tokens": request.prompt_tokens, "total_tokens": request.prompt_tokens},
    })

