"""Routing through a live gateway: conversations stay put, dead replicas are routed around."""

from collections.abc import Iterator

import httpx
import pytest

from enginesim.process import EngineSimProcess, start_enginesim
from fairness.models import Replica
from tests.support.cast import MODEL
from tests.support.live_admission import admission_stats
from tests.support.polling import wait_for


@pytest.fixture
def trio(gateway) -> Iterator[dict[str, EngineSimProcess]]:
    sims = {name: start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "20"])
            for name in ("rep-a", "rep-b", "rep-c")}
    for name, sim in sims.items():
        Replica.objects.create(name=name, base_url=sim.url, model=MODEL, max_num_seqs=8)
    yield sims
    for sim in sims.values():
        sim.stop()


def turn(gateway, member, messages) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": messages, "max_tokens": 8},
        headers={"authorization": f"Bearer {member.secret}"},
        timeout=30,
    )


def converse(gateway, member, opening: str, turns: int = 8) -> list[str]:
    """A chat whose history grows each turn; returns the replica of every turn."""
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": opening}]
    served = []
    for index in range(turns):
        response = turn(gateway, member, messages)
        assert response.status_code == 200, response.text
        served.append(response.headers["x-gpuportal-replica"])
        messages += [response.json()["choices"][0]["message"], {"role": "user", "content": f"and then {index}?"}]
    return served


def test_every_turn_of_a_conversation_lands_on_one_replica(gateway, cast, trio):
    homes = set()
    for topic in range(6):
        served = converse(gateway, cast["alice"], f"Topic number {topic}: tell me more.")
        assert len(set(served)) == 1, served
        homes.add(served[0])
    assert len(homes) >= 2  # different conversations spread over the replicas


def test_a_dead_replica_is_routed_around_and_used_again_once_back(gateway, cast, trio):
    opening = next(
        f"Question {i}" for i in range(200) if converse(gateway, cast["bob"], f"Question {i}", 1) == ["rep-b"]
    )
    port = trio["rep-b"].port
    trio["rep-b"].kill()

    # No client sees an error: the request is retried on the next replica in its order.
    served = converse(gateway, cast["bob"], opening, 3)
    assert "rep-b" not in served and len(set(served)) == 1

    trio["rep-b"] = start_enginesim(port=port, model=MODEL, max_num_seqs=8, extra_args=["--speed", "20"])
    wait_for(lambda: converse(gateway, cast["bob"], opening, 1) == ["rep-b"], timeout=15, interval=0.2,
             what="the recovered replica to take its conversation back")


def test_each_tier_reaches_only_its_own_deployment(gateway, cast, trio, tiers):
    Replica.objects.get(name="rep-a").tiers.set([tiers["interactive"]])
    Replica.objects.get(name="rep-b").tiers.set([tiers["batch"]])
    Replica.objects.get(name="rep-c").tiers.set([tiers["batch"]])
    for index in range(12):
        messages = [{"role": "user", "content": f"Conversation {index}"}]
        assert turn(gateway, cast["alice"], messages).headers["x-gpuportal-replica"] == "rep-a"
        assert turn(gateway, cast["carol"], messages).headers["x-gpuportal-replica"] in {"rep-b", "rep-c"}
    # Each deployment offers admission its own slots.
    groups = admission_stats()["groups"]
    assert groups[f"{MODEL}@rep-a"]["capacity"] == 8
    assert groups[f"{MODEL}@rep-b+rep-c"]["capacity"] == 16


def test_open_webuis_chat_id_keeps_a_chat_on_one_replica_when_its_opening_changes(gateway, cast, trio):
    # Open WebUI puts retrieved documents into the system message, so a chat's opening may change
    # every turn; the X-OpenWebUI-Chat-Id it sends names the conversation instead.
    def turns(chat: str, with_id: bool) -> set[str]:
        served = set()
        for index in range(5):
            messages = [{"role": "system", "content": f"Context for turn {index} of {chat}"},
                        {"role": "user", "content": "And then?"}]
            headers = {"authorization": f"Bearer {cast['alice'].secret}"}
            if with_id:
                headers["X-OpenWebUI-Chat-Id"] = chat
            response = httpx.post(gateway.url + "/v1/chat/completions", headers=headers, timeout=30,
                                  json={"model": MODEL, "messages": messages, "max_tokens": 8})
            assert response.status_code == 200, response.text
            served.add(response.headers["x-gpuportal-replica"])
        return served

    homes = [turns(f"chat-{n}", with_id=True) for n in range(6)]
    assert all(len(home) == 1 for home in homes), homes
    assert len(set().union(*homes)) >= 2  # different chats spread over the replicas
    assert any(len(turns(f"chat-{n}", with_id=False)) > 1 for n in range(6))  # without it, scattered
