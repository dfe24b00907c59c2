"""The replica form asks the engine before saving: a model left empty becomes the one the engine
serves, a model it does not serve is reported with what it does serve, and more sequences at once
than its KV cache has blocks (each running sequence holds one of its own) are refused. vLLM states
no --max-num-seqs, so that is the bound the engine's own figures give."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from enginesim.process import EngineSimProcess
from fairness.models import AuditEntry, Replica
from fairness.portal import replica_probe
from fairness.portal.forms import ReplicaPageForm
from fairness.portal.replica_probe import EngineFacts
from tests.support.cast import MODEL
from tests.support.enginesim import launch
from tests.support.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)

SMALL_MODEL = "small-cache"


@pytest.fixture(scope="module")
def small_cache() -> Iterator[EngineSimProcess]:
    """An engine whose KV cache has 8 blocks of 16 tokens: one 128-token sequence at full context,
    and never more than 8 sequences at once however short."""
    process = launch(8, "--max-model-len", "128", "--block-size", "16", "--num-gpu-blocks", "8", model=SMALL_MODEL)
    yield process
    process.stop()


def fields(**changes) -> dict:
    return {"name": "gpu1", "base_url": f"http://127.0.0.1:{free_port()}", "model": MODEL, "engine_kind": "vllm",
            "max_num_seqs": 8, "scheduling_policy": "fcfs", **changes}


def messages_of(response) -> str:
    return " ".join(str(m) for m in response.context["messages"])


def test_a_model_left_empty_is_filled_in_from_the_engine_and_audited(staff_client, tiers, sim):
    response = staff_client.post("/staff/replicas/new/", fields(base_url=sim.url, model=""), follow=True)
    assert response.redirect_chain == [("/staff/replicas/", 302)]
    assert Replica.objects.get(name="gpu1").model == MODEL
    assert f"answered and serves {MODEL}" in messages_of(response)
    assert AuditEntry.objects.get(action="replica.create").detail["model"] == MODEL


def test_emptying_the_model_on_an_edit_takes_the_engines_again(staff_client, tiers, sim):
    Replica.objects.create(name="gpu1", base_url=sim.url, model="typo")
    response = staff_client.post("/staff/replicas/gpu1/edit/", fields(base_url=sim.url, model=""), follow=True)
    assert Replica.objects.get(name="gpu1").model == MODEL
    assert AuditEntry.objects.get(action="replica.update").detail["model"] == MODEL
    assert "does not serve" not in messages_of(response)


def test_an_empty_model_is_refused_when_the_engine_does_not_answer(staff_client, tiers):
    response = staff_client.post("/staff/replicas/new/", fields(model=""))
    html = response.content.decode()
    assert response.status_code == 200
    assert "did not answer" in html and "Its model could not be read from it: type the model’s name." in html
    assert not Replica.objects.exists() and not AuditEntry.objects.exists()


def test_a_model_the_engine_does_not_serve_is_reported_with_the_ones_it_does(staff_client, tiers, sim):
    response = staff_client.post("/staff/replicas/new/", fields(base_url=sim.url, model="sim-typo"), follow=True)
    said = messages_of(response)
    assert f"does not serve the model “sim-typo”: its /v1/models lists “{MODEL}”." in said
    assert "The gateway routes to it anyway" in said
    assert Replica.objects.get(name="gpu1").model == "sim-typo"  # reported, not refused: staff may know better


def test_more_sequences_than_the_engine_has_kv_blocks_are_refused(staff_client, tiers, small_cache):
    response = staff_client.post("/staff/replicas/new/", fields(base_url=small_cache.url, model=SMALL_MODEL,
                                                                max_num_seqs=9))
    html = response.content.decode()
    assert response.status_code == 200
    assert "has 8 KV-cache blocks" in html and "can never run 9 at once" in html and "Give at most 8" in html
    assert not Replica.objects.exists() and not AuditEntry.objects.exists()


def test_as_many_sequences_as_blocks_are_saved_with_a_word_on_full_length_ones(staff_client, tiers, small_cache):
    response = staff_client.post("/staff/replicas/new/", fields(base_url=small_cache.url, model="", max_num_seqs=8),
                                 follow=True)
    assert Replica.objects.get(name="gpu1").model == SMALL_MODEL
    said = messages_of(response)
    assert "holds 128 tokens in its KV cache: 1 sequence of its full context (128 tokens) at once" in said
    assert "fewer than the 8 the gateway lets run there" in said


def test_raising_sequences_past_the_blocks_on_an_edit_is_refused_and_changes_nothing(staff_client, tiers,
                                                                                     small_cache):
    Replica.objects.create(name="gpu1", base_url=small_cache.url, model=SMALL_MODEL, max_num_seqs=1)
    edit = fields(base_url=small_cache.url, model=SMALL_MODEL, max_num_seqs=64)
    response = staff_client.post("/staff/replicas/gpu1/edit/", edit)
    assert response.status_code == 200 and "can never run 64 at once" in response.content.decode()
    assert Replica.objects.get(name="gpu1").max_num_seqs == 1 and not AuditEntry.objects.exists()
    response = staff_client.post("/staff/replicas/gpu1/edit/", {**edit, "max_num_seqs": 2}, follow=True)
    assert Replica.objects.get(name="gpu1").max_num_seqs == 2
    assert "fewer than the 2 the gateway lets run there" in messages_of(response)
    # Back to the one full-length sequence that fits: no word about the cache.
    response = staff_client.post("/staff/replicas/gpu1/edit/", {**edit, "max_num_seqs": 1}, follow=True)
    assert Replica.objects.get(name="gpu1").max_num_seqs == 1 and "KV cache" not in messages_of(response)


def test_a_researcher_cannot_add_a_replica_or_have_an_engine_asked(researcher_client, tiers, small_cache):
    response = researcher_client.post("/staff/replicas/new/", fields(base_url=small_cache.url, model="",
                                                                     max_num_seqs=9))
    assert response.status_code == 403 and b"KV-cache" not in response.content
    assert not Replica.objects.exists()


def test_the_engine_is_not_asked_when_nothing_it_would_answer_changed(tiers):
    replica = Replica.objects.create(name="gpu1", base_url="http://127.0.0.1:9", model=MODEL, max_num_seqs=4)

    def asked(candidate: Replica) -> EngineFacts:
        raise AssertionError(f"the engine was asked about {candidate.base_url}")

    unchanged = {"base_url": replica.base_url, "model": MODEL, "engine_kind": "vllm", "max_num_seqs": 4,
                 "scheduling_policy": "priority", "tiers": [tiers["batch"].pk]}
    form = ReplicaPageForm(unchanged, instance=replica, look=asked)
    assert form.is_valid(), form.errors
    assert form.engine is None


# -- what is taken from an answer, on its own ---------------------------------------------------


def test_only_model_names_are_taken_from_a_models_list():
    answer = {"object": "list", "data": [
        {"id": "llama-3"}, {"id": "llama-3"}, {"id": "two words"}, {"id": "a|b"}, {"id": ""}, {"id": 7},
        {"id": "x" * 201}, "not a card", {"id": "lora/adapter-1"},
    ]}
    assert replica_probe.served_models(answer) == ("llama-3", "lora/adapter-1")
    assert replica_probe.served_models({"data": "nope"}) == ()
    assert replica_probe.served_models(["llama-3"]) == ()


def test_an_engine_serving_several_models_leaves_the_choice_to_staff():
    facts = EngineFacts("gpu1 at http://e:8000", models=tuple(f"m{n}" for n in range(7)))
    model, why = replica_probe.model_to_fill(facts)
    assert model == "" and why == ("gpu1 at http://e:8000 serves 7 models (“m0”, “m1”, “m2”, “m3”, “m4” and 2 more): "
                                   "type the one this replica is for.")
    assert replica_probe.model_to_fill(EngineFacts("gpu1 at http://e:8000"))[1].endswith("lists no model on "
                                                                                          "/v1/models: type the "
                                                                                          "model’s name.")
    assert replica_probe.model_to_fill(EngineFacts("g", models=("only",))) == ("only", "")


def test_the_sequence_bound_holds_only_where_the_engine_states_its_blocks():
    assert replica_probe.sequences_refused(EngineFacts("g", kv_blocks=8), 8) == ""
    assert "can never run 9 at once" in replica_probe.sequences_refused(EngineFacts("g", kv_blocks=8), 9)
    assert replica_probe.sequences_refused(EngineFacts("g"), 10_000) == ""  # llama.cpp, TGI: nothing to go by
