"""Each model's context is the one its engines state (GET /v1/models, `max_model_len`), read off
the request path and trusted no further than a sane whole number; a budgeted request that names no
completion limit is lowered to that context less its prompt."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.gateway import context_lengths, engine_client
from fairness.gateway.context_lengths import ContextLengths, stated_context
from fairness.gateway.views import LOWERED_HEADER
from fairness.models import Budget, Replica
from tests.support.cast import MODEL, Member
from tests.support.gateway_process import GatewayProcess
from tests.support.polling import wait_for
from tests.support.replicas import replica


def models(model: str, figure: object) -> dict[str, object]:
    """vLLM's answer shape (its ModelList of ModelCard)."""
    card = {"id": model, "object": "model", "created": 0, "owned_by": "vllm", "root": model, "parent": None,
            "max_model_len": figure, "permission": []}
    return {"object": "list", "data": [card]}


def test_the_stated_context_of_the_model_is_read_from_vllms_answer():
    assert stated_context(models("m", 32768), "m") == 32768
    lora = models("m", 32768)
    lora["data"].insert(0, {"id": "m-lora", "max_model_len": 8192, "parent": "m"})  # type: ignore[attr-defined]
    assert stated_context(lora, "m") == 32768  # the card of the model the replica serves
    assert stated_context(models("other", 32768), "m") is None


@pytest.mark.parametrize("figure", [None, "32768", 32768.0, True, -1, 0, 64, 10**12, [4096]])
def test_a_figure_that_is_not_a_sane_whole_number_is_not_taken(figure):
    assert stated_context(models("m", figure), "m") is None


@pytest.mark.parametrize("answer", [[], "list", {"data": {"id": "m"}}, {"data": ["m"]}, None])
def test_an_answer_not_shaped_as_a_model_list_states_nothing(answer):
    assert stated_context(answer, "m") is None


@pytest.fixture
async def engines() -> dict[str, Callable[[httpx.Request], httpx.Response]]:
    """The replicas' /v1/models answers by host (the outbound seam mocked), and a count of asks."""
    answers: dict[str, Callable[[httpx.Request], httpx.Response]] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/models"
        return answers[request.url.host](request)

    engine_client._clients[asyncio.get_running_loop()] = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    yield answers
    await engine_client.aclose()


def stating(figure: object, asked: list[int] | None = None) -> Callable[[httpx.Request], httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        if asked is not None:
            asked.append(1)
        return httpx.Response(200, json=models("m", figure))

    return answer


async def test_a_model_gets_the_smallest_context_its_replicas_state(engines, settings):
    settings.GP_MODEL_CONTEXT_TOKENS = 4096
    a, b, c = (replica(n, base_url=f"http://{n}.invalid:8000") for n in ("a", "b", "c"))
    engines.update({"a.invalid": stating(32768), "b.invalid": stating(8192), "c.invalid": stating("lots")})
    known = ContextLengths()
    assert known.of([a, b]) == 4096  # nothing asked yet: the setting stands in
    await known.learn([a, b, c], up={"a", "b", "c"}, timeout=1.0)
    assert known.of([a, b]) == 8192 and known.of([a]) == 32768
    assert known.of([c]) == 4096  # its answer was not a figure


async def test_a_replica_is_asked_once_while_up_and_again_after_it_comes_back(engines):
    asked: list[int] = []
    a = replica("a", base_url="http://a.invalid:8000")
    engines["a.invalid"] = stating(2048, asked)
    known = ContextLengths()
    for _ in range(3):
        await known.learn([a], up={"a"}, timeout=1.0)
    assert len(asked) == 1 and known.of([a]) == 2048
    await known.learn([a], up=set(), timeout=1.0)  # down: not asked
    engines["a.invalid"] = stating(16384, asked)  # restarted with a longer context
    await known.learn([a], up={"a"}, timeout=1.0)
    assert len(asked) == 2 and known.of([a]) == 16384


async def test_an_oversized_or_garbled_answer_states_nothing(engines, settings):
    settings.GP_MODEL_CONTEXT_TOKENS = 4096
    a, b, c = (replica(n, base_url=f"http://{n}.invalid:8000") for n in ("a", "b", "c"))
    padding = "x" * context_lengths.MAX_ANSWER_BYTES
    engines["a.invalid"] = lambda request: httpx.Response(200, json={**models("m", 8192), "padding": padding})
    engines["b.invalid"] = lambda request: httpx.Response(200, content=b"[" * 100_000)  # past the parser's depth
    engines["c.invalid"] = lambda request: httpx.Response(404, json=models("m", 8192))
    known = ContextLengths()
    await known.learn([a, b, c], up={"a", "b", "c"}, timeout=1.0)
    assert known.of([a]) == known.of([b]) == known.of([c]) == 4096


# Through the gateway, to an engine of a short context.

SHORT_CONTEXT = 1024


@pytest.fixture
def short(cast: dict[str, Member]) -> Iterator[EngineSimProcess]:
    with start_enginesim(model=MODEL, max_num_seqs=8,
                         extra_args=["--speed", "20", "--max-model-len", str(SHORT_CONTEXT)]) as engine:
        Replica.objects.create(name="short", base_url=engine.url, model=MODEL, max_num_seqs=8)
        yield engine


def test_a_budgeted_request_without_a_limit_is_lowered_to_the_engines_context_less_its_prompt(
    gateway: GatewayProcess, short: EngineSimProcess, cast: dict[str, Member]
):
    Budget.objects.create(key_id=cast["alice"].key_id, tokens=1_000_000, period=Budget.Period.DAY)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Tell a story."}]}).encode()
    expected = SHORT_CONTEXT - len(body) // 4  # the gateway's prompt estimate, four bytes a token

    def lowered() -> httpx.Response | None:
        response = httpx.post(gateway.url + "/v1/chat/completions", content=body, timeout=30, headers={
            "authorization": f"Bearer {cast['alice'].secret}", "content-type": "application/json"})
        return response if response.headers.get(LOWERED_HEADER) == str(expected) else None

    # The health loop reads the context within an interval of the replica coming up.
    response = wait_for(lowered, timeout=10, interval=0.2, what="the engine's context in the limit")
    assert response.status_code == 200, response.text  # within the engine's context, so it ran
