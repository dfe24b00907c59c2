"""Replicas through the pages: adding one probes it, editing, deleting, Disable asking first,
"Stop draining", and a disabled replica showing its last poll."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fairness.models import AuditEntry, EngineSample, Replica
from tests.support.cast import MODEL
from tests.support.processes import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def fields(**changes) -> dict:
    return {"name": "gpu1", "base_url": f"http://127.0.0.1:{free_port()}", "model": MODEL, "engine_kind": "vllm",
            "max_num_seqs": 8, "scheduling_policy": "fcfs", **changes}


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_adding_a_replica_that_answers_with_its_model_says_so(staff_client, tiers, sim):
    response = staff_client.post("/staff/replicas/new/", fields(base_url=sim.url), follow=True)
    said = " ".join(messages_of(response))
    assert "answered and serves sim" in said and "did not answer" not in said


def test_adding_a_replica_that_does_not_answer_warns_but_adds_it(staff_client, tiers):
    response = staff_client.post("/staff/replicas/new/", fields(), follow=True)
    said = " ".join(messages_of(response))
    assert "gpu1 at http://127.0.0.1:" in said and "did not answer" in said and "is unreachable" in said
    assert Replica.objects.filter(name="gpu1").exists()


def test_adding_a_replica_that_serves_another_model_warns(staff_client, tiers, sim):
    response = staff_client.post("/staff/replicas/new/", fields(base_url=sim.url, model="not-served"), follow=True)
    assert "does not serve the model “not-served”" in " ".join(messages_of(response))


def test_editing_keeps_the_name_and_the_engine_key_unless_removed(staff_client, tiers, sim):
    Replica.objects.create(name="gpu1", base_url=sim.url, model=MODEL, api_key="engine-secret-123")
    form = staff_client.get("/staff/replicas/gpu1/edit/").content.decode()
    assert "engine-secret-123" not in form and "leave this empty to keep it" in form

    edit = {k: v for k, v in fields(base_url=sim.url, max_num_seqs=16, tiers=[tiers["batch"].pk],
                                    name="renamed").items()}
    response = staff_client.post("/staff/replicas/gpu1/edit/", edit, follow=True)
    replica = Replica.objects.get(name="gpu1")  # the name field is fixed on an edit
    assert (replica.max_num_seqs, replica.api_key) == (16, "engine-secret-123")
    assert list(replica.tiers.values_list("name", flat=True)) == ["batch"]
    assert "Saved replica gpu1" in " ".join(messages_of(response))
    assert "answered" not in " ".join(messages_of(response))  # address, model and key unchanged: no probe
    entry = AuditEntry.objects.get(action="replica.update")
    assert entry.detail == {"max_num_seqs": 16, "tiers": ["batch"]}

    staff_client.post("/staff/replicas/gpu1/edit/", {**edit, "remove_api_key": "on"})
    assert Replica.objects.get(name="gpu1").api_key == ""
    assert "engine-secret-123" not in str(list(AuditEntry.objects.values_list("detail", flat=True)))


def test_editing_the_address_probes_it_again(staff_client, tiers, sim):
    Replica.objects.create(name="gpu1", base_url=sim.url, model=MODEL)
    response = staff_client.post("/staff/replicas/gpu1/edit/", fields(), follow=True)
    assert "did not answer" in " ".join(messages_of(response))


def test_deleting_asks_first_then_deletes_and_audits(staff_client, tiers):
    replica = Replica.objects.create(name="gpu1", base_url="http://127.11.2.4:9", model=MODEL)
    EngineSample.objects.create(replica=replica, taken_at=timezone.now())
    question = staff_client.get("/staff/replicas/gpu1/delete/")
    assert "Delete replica gpu1?" in question.content.decode()
    assert Replica.objects.filter(name="gpu1").exists()  # looking changes nothing

    staff_client.post("/staff/replicas/gpu1/delete/")
    assert not Replica.objects.filter(name="gpu1").exists() and not EngineSample.objects.exists()
    entry = AuditEntry.objects.get(action="replica.delete")
    assert (entry.target, entry.detail) == ("gpu1", {"base_url": "http://127.11.2.4:9"})


def test_disable_asks_first_like_revoke(staff_client, tiers):
    Replica.objects.create(name="gpu1", base_url="http://127.11.2.4:9", model=MODEL)
    listing = staff_client.get("/staff/replicas/").content.decode()
    assert '<a class="danger" href="/staff/replicas/gpu1/disable/">Disable' in listing  # a link, not a button
    question = staff_client.get("/staff/replicas/gpu1/disable/").content.decode()
    assert "Disable replica gpu1?" in question and 'action="/staff/replicas/gpu1/disable/"' in question
    assert Replica.objects.get(name="gpu1").enabled
    staff_client.post("/staff/replicas/gpu1/disable/")
    assert not Replica.objects.get(name="gpu1").enabled
    assert staff_client.get("/staff/replicas/gpu1/drain/").status_code == 405  # only Disable asks


def test_a_draining_replica_offers_stop_draining(staff_client, tiers):
    Replica.objects.create(name="gpu1", base_url="http://127.11.2.4:9", model=MODEL, draining=True)
    listing = staff_client.get("/staff/replicas/").content.decode()
    assert "Stop draining" in listing
    response = staff_client.post("/staff/replicas/gpu1/enable/", follow=True)
    assert "gpu1 stopped draining" in response.content.decode()
    assert not Replica.objects.get(name="gpu1").draining


def test_a_disabled_replica_shows_its_last_verdict(staff_client, tiers):
    replica = Replica.objects.create(name="gpu1", base_url="http://127.11.2.4:9", model=MODEL, enabled=False)
    never = staff_client.get("/staff/replicas/").content.decode()
    assert "never polled" in never and "not polled yet" not in never
    EngineSample.objects.create(replica=replica, taken_at=timezone.now() - dt.timedelta(minutes=5), healthy=True)
    EngineSample.objects.create(replica=replica, taken_at=timezone.now() - dt.timedelta(minutes=3), healthy=False)
    html = staff_client.get("/staff/replicas/").content.decode()
    row = html[html.index(">gpu1<"):]
    assert "last seen</span> <span class=\"health down\">down</span>" in row and "3 min ago" in row
    assert "not polled yet" not in row


def test_an_embedding_replica_is_added_as_one_and_keeps_its_kind_through_an_edit_that_leaves_it_out(staff_client,
                                                                                                   tiers):
    form = staff_client.get("/staff/replicas/new/").content.decode()
    assert 'name="model_kind"' in form and "embeddings" in form
    added = fields(name="embed0", model="bge", model_kind="embedding")
    staff_client.post("/staff/replicas/new/", added, follow=True)
    assert Replica.objects.get(name="embed0").model_kind == Replica.ModelKind.EMBEDDING
    assert "embeddings" in staff_client.get("/staff/replicas/").content.decode()
    edited = {k: v for k, v in added.items() if k != "model_kind"}  # a form that does not know the field
    staff_client.post("/staff/replicas/embed0/edit/", {**edited, "max_num_seqs": 4}, follow=True)
    replica = Replica.objects.get(name="embed0")
    assert (replica.model_kind, replica.max_num_seqs) == (Replica.ModelKind.EMBEDDING, 4)
    assert AuditEntry.objects.get(action="replica.update").detail == {"max_num_seqs": 4, "tiers": []}
    # The same model as a chat model beside it would be one model of two kinds: refused, saying so.
    refused = staff_client.post("/staff/replicas/new/", fields(name="chat0", model="bge"))
    assert "as chat and as embedding models" in refused.content.decode()
    assert not Replica.objects.filter(name="chat0").exists()
