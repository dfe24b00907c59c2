"""POST /v1/responses (OpenAI's Responses API, as vLLM serves it) through a live gateway to chat
replicas (enginesim), with the official openai SDK: answered whole and streamed, charged from the
response's own usage; a conversation's turns (`previous_response_id`) run on the replica that
stored it, waiting for it when it is full rather than going where the engine would not know it;
a stored response is reached (GET, DELETE) by the person who made it only; bad input is refused
in OpenAI's shape."""

from __future__ import annotations

import socket
import threading

import httpx
import openai
import pytest

from fairness.models import ApiKey, Budget, Replica
from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.cast import EMBEDDING_MODEL, MODEL
from tests.support.polling import wait_for
from tests.support.usage_records import recorded
from tests.support.v1_calls import CHAT, assert_error, hanging_chat, post


def client_for(gateway, member) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=member.secret, max_retries=0, timeout=60)


def respond(gateway, member, body: dict) -> httpx.Response:
    return post(gateway, member.secret, body, path="/v1/responses")


def test_the_sdk_gets_a_whole_response_and_its_usage_is_charged(cast, gateway, replica):
    raw = client_for(gateway, cast["alice"]).responses.with_raw_response.create(
        model=MODEL, input="Say hello to the lab.", instructions="Be brief.", max_output_tokens=12)
    response = raw.parse()
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.output_text and 1 <= response.usage.output_tokens <= 12
    row = recorded(raw.headers["x-request-id"])
    assert (row.endpoint, row.model, row.replica, row.status) == ("responses", MODEL, "sim-a", 200)
    assert (row.prompt_tokens, row.completion_tokens) == (response.usage.input_tokens, response.usage.output_tokens)
    assert row.prompt_tokens > 5


def test_a_streamed_response_is_charged_from_its_completed_event(cast, gateway, replica):
    raw = client_for(gateway, cast["bob"]).responses.with_raw_response.create(
        model=MODEL, input="Tell me about spring.", max_output_tokens=16, stream=True)
    events = list(raw.parse())
    completed = [e for e in events if e.type == "response.completed"]
    assert len(completed) == 1 and events[-1] is completed[0]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and completed[0].response.output_text == text
    usage = completed[0].response.usage
    row = recorded(raw.headers["x-request-id"])
    assert (row.endpoint, row.status) == ("responses", 200)
    assert (row.prompt_tokens, row.completion_tokens) == (usage.input_tokens, usage.output_tokens)


def test_a_conversation_waits_for_the_full_replica_that_stored_it_rather_than_move(
    cast, gateway, replica, on_engine8, sim, engine8
):
    alice, bob, carol = cast["alice"], cast["bob"], cast["carol"]
    client = client_for(gateway, alice)
    first = client.responses.with_raw_response.create(model=MODEL, input="Remember the word 'heron'.",
                                                      max_output_tokens=8)
    home_name = first.headers["x-gpuportal-replica"]
    home, other = (replica, on_engine8) if home_name == "sim-a" else (on_engine8, replica)
    home_engine = sim if home is replica else engine8
    turns = [first.parse()]
    for turn in range(3):  # whole and streamed turns, each on the replica that holds the last
        ask = dict(model=MODEL, input=f"And turn {turn}?", max_output_tokens=8, previous_response_id=turns[-1].id)
        if turn == 1:
            raw = client.responses.with_raw_response.create(**ask, stream=True)
            done = [e for e in raw.parse() if e.type == "response.completed"]
            answer = done[0].response
        else:
            raw = client.responses.with_raw_response.create(**ask)
            answer = raw.parse()
        assert raw.headers["x-gpuportal-replica"] == home_name
        assert answer.usage.input_tokens > turns[-1].usage.input_tokens  # it carried the conversation on
        turns.append(answer)

    # The home replica, made one slot wide, is filled by bob's request, which hangs there; the
    # other replica is idle (carol's chat goes there at once).
    Replica.objects.filter(pk=home.pk).update(max_num_seqs=1)
    Replica.objects.filter(pk=other.pk).update(enabled=False)
    Replica.objects.get(pk=home.pk).save()  # a saved change: the gateways reload
    home_engine.set_faults(stall=True)
    held = hanging_chat(gateway, bob.secret)
    wait_for(lambda: person_load(redis_sync()).get((bob.user_id, bob.tier), (0, 0))[0] == 1, what="bob's request")
    home_engine.set_faults(stall=False)
    Replica.objects.filter(pk=other.pk).update(enabled=True)
    Replica.objects.get(pk=other.pk).save()
    wait_for(lambda: (r := post(gateway, carol.secret, CHAT)).status_code == 200
             and r.headers["x-gpuportal-replica"] == other.name, what="the other replica, taking work")

    answers: list = []
    asking = threading.Thread(target=lambda: answers.append(client.responses.with_raw_response.create(
        model=MODEL, input="Still there?", max_output_tokens=8, previous_response_id=turns[-1].id)), daemon=True)
    asking.start()
    wait_for(lambda: person_load(redis_sync()).get((alice.user_id, alice.tier), (0, 0))[1] == 1,
             what="alice's turn queued for its replica")
    held.shutdown(socket.SHUT_RDWR)  # bob leaves: his slot is given back, and the turn takes it
    held.close()
    asking.join(timeout=30)
    assert answers, "the turn never came back"
    assert answers[0].headers["x-gpuportal-replica"] == home_name
    assert int(answers[0].headers["x-gpuportal-queued-ms"]) > 0
    assert answers[0].parse().usage.input_tokens > turns[-1].usage.input_tokens


def test_a_stored_response_is_reached_by_its_maker_only_and_gone_once_deleted(cast, gateway, replica):
    alice, bob = cast["alice"], cast["bob"]
    made = client_for(gateway, alice).responses.create(model=MODEL, input="Keep this.", max_output_tokens=8)
    fetched = client_for(gateway, alice).responses.retrieve(made.id)
    assert (fetched.id, fetched.output_text) == (made.id, made.output_text)

    with pytest.raises(openai.NotFoundError):
        client_for(gateway, bob).responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        client_for(gateway, bob).responses.delete(made.id)
    refused = respond(gateway, bob, {"model": MODEL, "input": "Mine now?", "previous_response_id": made.id})
    assert assert_error(refused, 404, "response_not_found")["param"] == "previous_response_id"
    headers = {"authorization": f"Bearer {bob.secret}"}
    for missing in (made.id, "resp_nothing-here", "x" * 300):  # another's, none, and no id at all: alike
        answer = httpx.get(gateway.url + "/v1/responses/" + missing, headers=headers, timeout=30)
        assert assert_error(answer, 404, "response_not_found")["message"].startswith("Response with id")

    client_for(gateway, alice).responses.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        client_for(gateway, alice).responses.retrieve(made.id)
    gone = respond(gateway, alice, {"model": MODEL, "input": "Again?", "previous_response_id": made.id})
    assert_error(gone, 404, "response_not_found")


def test_a_response_not_stored_is_not_remembered(cast, gateway, replica):
    made = client_for(gateway, cast["alice"]).responses.create(model=MODEL, input="Forget this.", store=False,
                                                                max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client_for(gateway, cast["alice"]).responses.retrieve(made.id)


BAD = [
    ({"model": MODEL}, "input", "missing_required_parameter"),
    ({"model": MODEL, "input": ""}, "input", "invalid_type"),
    ({"model": MODEL, "input": []}, "input", "invalid_type"),
    ({"model": MODEL, "input": [3]}, "input", "invalid_type"),
    ({"model": MODEL, "input": "x", "max_output_tokens": 0}, "max_output_tokens", "invalid_type"),
    ({"model": MODEL, "input": "x", "max_output_tokens": "8"}, "max_output_tokens", "invalid_type"),
    ({"model": MODEL, "input": "x", "previous_response_id": 7}, "previous_response_id", "invalid_type"),
    ({"model": MODEL, "input": "x", "store": "yes"}, "store", "invalid_type"),
    ({"model": MODEL, "input": "x", "stream": "yes"}, "stream", "invalid_type"),
    ({"model": MODEL, "input": "x", "background": True}, "background", "unsupported_value"),
    ({"model": MODEL, "input": "x", "temperature": "warm"}, "temperature", "invalid_type"),
    ({"input": "x"}, "model", "missing_required_parameter"),
]


def test_bad_responses_bodies_get_openai_shaped_400s_naming_the_field(cast, gateway, replica, embedding_replica):
    alice = cast["alice"]
    for body, param, code in BAD:
        assert assert_error(respond(gateway, alice, body), 400, code)["param"] == param, body
    assert_error(respond(gateway, alice, {"model": EMBEDDING_MODEL, "input": "x"}), 400, "wrong_model_kind")
    assert_error(respond(gateway, alice, {"model": "nowhere", "input": "x"}), 404, "model_not_found")
    headers = {"authorization": f"Bearer {alice.secret}"}
    assert_error(httpx.put(gateway.url + "/v1/responses/resp_x", headers=headers, timeout=30), 405)
    assert_error(httpx.get(gateway.url + "/v1/responses/resp_x/input_items", headers=headers, timeout=30), 404,
                 "unknown_url")
    assert respond(gateway, alice, {"model": MODEL, "input": "fine", "max_output_tokens": 4}).status_code == 200


def test_a_budget_counts_response_tokens(cast, gateway, replica):
    bob = cast["bob"]
    Budget.objects.create(key=ApiKey.objects.get(pk=bob.key_id), tokens=150, period=Budget.Period.DAY)
    body = {"model": MODEL, "input": "the quick brown fox jumps over the lazy dog " * 9, "max_output_tokens": 8}
    answers = [respond(gateway, bob, body) for _ in range(4)]  # about 110 tokens each
    assert answers[0].status_code == 200
    refused = next(a for a in answers if a.status_code != 200)
    assert_error(refused, 429, "budget_exceeded")
    assert respond(gateway, cast["alice"], body).status_code == 200  # alice's own budget is untouched
