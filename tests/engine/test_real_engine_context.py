"""Against real vLLM: the gateway reads each model's context from the engine's /v1/models, so a
budgeted request that names no completion limit runs to what that context leaves after its prompt."""

from __future__ import annotations

import json

import httpx

from fairness.gateway.views import LOWERED_HEADER
from fairness.models import Budget
from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.support.cast import Member
from tests.support.gateway_process import GatewayProcess
from tests.support.polling import wait_for

CONTEXT = 1024  # what the tier's servers are started with (vllm_server.VLLMServer)
MESSAGES = [{"role": "user", "content": "Tell me about the weather in spring."}]


def test_a_budgeted_request_without_a_limit_is_lowered_to_vllms_context_less_its_prompt(
    cast: dict[str, Member], gateway: GatewayProcess, engine_replicas
):
    Budget.objects.create(key_id=cast["alice"].key_id, tokens=1_000_000, period=Budget.Period.DAY)
    body = json.dumps({"model": TINY, "messages": MESSAGES, "stream": True}).encode()
    expected = str(CONTEXT - len(body) // 4)
    headers = {"authorization": f"Bearer {cast['alice'].secret}", "content-type": "application/json"}

    def lowered() -> int | None:
        # The headers say the limit; the stream is left at once, so the engine stops.
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", content=body, headers=headers,
                          timeout=120) as response:
            said = response.headers.get(LOWERED_HEADER)
            return response.status_code if said == expected else None

    assert wait_for(lowered, timeout=30, interval=0.5, what="vLLM's context in the limit") == 200
