"""/tokenize and /detokenize against real vLLM, through the gateway: the counts and ids are the
engine's own, and the ids come back to the text."""

import httpx

from tests.engine.vllm_server import SERVED_MODEL_NAME as TINY
from tests.support.v1_calls import post

TEXT = "Herons wade in shallow water."


def test_the_gateway_answers_what_the_engine_answers_and_the_text_comes_back(cast, gateway, engine_replicas,
                                                                           vllm_pair):
    alice = cast["alice"].secret
    counted = post(gateway, alice, {"model": TINY, "prompt": TEXT}, path="/tokenize")
    assert counted.status_code == 200, counted.text
    direct = httpx.post(vllm_pair[0].base_url + "/tokenize", json={"model": TINY, "prompt": TEXT}, timeout=60)
    assert counted.json()["tokens"] == direct.json()["tokens"]
    assert counted.json()["count"] == len(counted.json()["tokens"]) > 3
    back = post(gateway, alice, {"model": TINY, "tokens": counted.json()["tokens"]}, path="/detokenize")
    assert back.status_code == 200, back.text
    assert TEXT in back.json()["prompt"]
