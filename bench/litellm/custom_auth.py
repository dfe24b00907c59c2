"""LiteLLM ``custom_auth`` for bench/overhead.py: known keys get their max_parallel_requests.

The benchmark passes the keys as JSON in ``BENCH_LITELLM_KEYS`` ({secret: limit}); there is no
database. LiteLLM's own limiter enforces the limit (rejecting with 429 when a key has that
many requests in flight).
"""

from __future__ import annotations

import json
import os

from fastapi import Request
from litellm.proxy._types import ProxyException, UserAPIKeyAuth

_LIMITS: dict[str, int] = {
    secret: int(limit) for secret, limit in json.loads(os.environ.get("BENCH_LITELLM_KEYS", "{}")).items()
}


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    secret = api_key.removeprefix("Bearer ").strip()
    limit = _LIMITS.get(secret)
    if limit is None:
        raise ProxyException(message="Unknown API key", type="auth_error", param="api_key", code=401)
    return UserAPIKeyAuth(api_key=secret, key_alias=f"bench-{secret[-6:]}", max_parallel_requests=limit)
