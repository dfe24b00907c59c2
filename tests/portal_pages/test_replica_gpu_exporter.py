"""Naming a replica's GPU exporter: the staff form, the admin API and add_replica set it, each
change audited, with the base URL's address rules; nobody but staff can."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from fairness.models import AuditEntry, EngineSample, Replica
from tests.support.cast import MODEL
from tests.support.dcgm_exporter import DcgmExporter

pytestmark = pytest.mark.django_db(transaction=True)

EXPORTER = "http://127.11.2.9:9400/metrics"


@pytest.fixture
def gpu1(tiers) -> Replica:
    return Replica.objects.create(name="gpu1", base_url="http://127.11.2.3:9", model=MODEL, max_num_seqs=8)


def form(**changes) -> dict:
    return {"base_url": "http://127.11.2.3:9", "model": MODEL, "engine_kind": "vllm", "model_kind": "chat",
            "max_num_seqs": 8, "scheduling_policy": "fcfs", "gpu_metrics_url": "", **changes}


def api(client, method: str, path: str, body: dict):
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json")


def audited(action: str = "replica.update") -> list[dict]:
    return [e.detail for e in AuditEntry.objects.filter(action=action, target="gpu1").order_by("pk")]


def test_staff_name_the_exporter_on_the_replica_form_and_it_is_audited(staff_client, gpu1):
    page = staff_client.get("/staff/replicas/gpu1/edit/").content.decode()
    assert "GPU exporter (DCGM) address" in page
    response = staff_client.post("/staff/replicas/gpu1/edit/", form(gpu_metrics_url=EXPORTER))
    assert response.status_code == 302
    gpu1.refresh_from_db()
    assert gpu1.gpu_metrics_url == EXPORTER
    assert audited() == [{"gpu_metrics_url": EXPORTER, "tiers": []}]


def test_the_form_refuses_an_exporter_address_with_credentials_or_a_query(staff_client, gpu1):
    for address, said in (("http://admin:pw@127.11.2.9:9400/metrics", "no user name or password"),
                          ("http://127.11.2.9:9400/metrics?x=1", "Leave out the query"),
                          ("ftp://127.11.2.9/metrics", "Use an http:// or https:// address")):
        response = staff_client.post("/staff/replicas/gpu1/edit/", form(gpu_metrics_url=address))
        assert response.status_code == 200 and said in response.content.decode(), address
    gpu1.refresh_from_db()
    assert gpu1.gpu_metrics_url == "" and audited() == []


def test_a_form_posted_without_the_field_keeps_the_exporter(staff_client, gpu1):
    gpu1.gpu_metrics_url = EXPORTER
    gpu1.save()
    body = {k: v for k, v in form(max_num_seqs=16).items() if k != "gpu_metrics_url"}
    assert staff_client.post("/staff/replicas/gpu1/edit/", body).status_code == 302
    gpu1.refresh_from_db()
    assert (gpu1.max_num_seqs, gpu1.gpu_metrics_url) == (16, EXPORTER)
    assert audited() == [{"max_num_seqs": 16, "tiers": []}]


def test_a_researcher_can_set_no_exporter_by_page_or_api(researcher_client, gpu1):
    researcher_client.post("/staff/replicas/gpu1/edit/", form(gpu_metrics_url=EXPORTER))
    assert api(researcher_client, "patch", "/api/admin/replicas/gpu1", {"gpu_metrics_url": EXPORTER}).status_code == 401
    gpu1.refresh_from_db()
    assert gpu1.gpu_metrics_url == "" and not AuditEntry.objects.filter(action__startswith="replica.").exists()


def test_the_admin_api_adds_a_replica_with_its_exporter(staff_client, tiers):
    body = {"name": "gpu1", "base_url": "http://127.11.2.3:9", "model": MODEL, "gpu_metrics_url": EXPORTER}
    response = api(staff_client, "post", "/api/admin/replicas", body)
    assert response.status_code == 201 and response.json()["gpu_metrics_url"] == EXPORTER
    assert Replica.objects.get(name="gpu1").gpu_metrics_url == EXPORTER
    assert audited("replica.create")[0]["gpu_metrics_url"] == EXPORTER
    listed = staff_client.get("/api/admin/replicas").json()
    assert [r["gpu_metrics_url"] for r in listed] == [EXPORTER]


def test_the_admin_api_names_and_clears_an_exporter_audited(staff_client, gpu1):
    response = api(staff_client, "patch", "/api/admin/replicas/gpu1", {"gpu_metrics_url": EXPORTER})
    assert response.status_code == 200 and response.json()["gpu_metrics_url"] == EXPORTER
    assert api(staff_client, "patch", "/api/admin/replicas/gpu1", {"gpu_metrics_url": ""}).status_code == 200
    gpu1.refresh_from_db()
    assert gpu1.gpu_metrics_url == ""
    assert audited() == [{"gpu_metrics_url": EXPORTER}, {"gpu_metrics_url": ""}]


def test_the_admin_api_refuses_a_bad_exporter_address_and_an_unknown_replica(staff_client, gpu1):
    response = api(staff_client, "patch", "/api/admin/replicas/gpu1",
                   {"gpu_metrics_url": "http://127.11.2.9:9400/metrics#x"})
    assert response.status_code == 422 and "gpu_metrics_url" in response.json()["detail"]
    assert api(staff_client, "patch", "/api/admin/replicas/nope", {"gpu_metrics_url": EXPORTER}).status_code == 404
    gpu1.refresh_from_db()
    assert gpu1.gpu_metrics_url == "" and audited() == []


def test_add_replica_sets_keeps_and_clears_the_exporter(tiers):
    def add(*args: str) -> None:
        call_command("add_replica", "--name", "gpu1", "--url", "http://127.11.2.3:9", "--model", MODEL,
                     "--max-num-seqs", "8", *args, stdout=io.StringIO())

    add("--gpu-metrics-url", EXPORTER)
    assert Replica.objects.get(name="gpu1").gpu_metrics_url == EXPORTER
    assert audited("replica.create")[0]["gpu_metrics_url"] == EXPORTER
    add()  # left out: kept
    assert Replica.objects.get(name="gpu1").gpu_metrics_url == EXPORTER
    add("--gpu-metrics-url", "")
    assert Replica.objects.get(name="gpu1").gpu_metrics_url == ""
    cleared = audited()[-1]
    assert cleared["gpu_metrics_url"] == "" and "--gpu-metrics-url ''" in cleared["command"]
    with pytest.raises(CommandError, match="gpu_metrics_url: .*no user name or password"):
        add("--gpu-metrics-url", "http://u:p@127.11.2.9:9400/metrics")
    assert Replica.objects.get(name="gpu1").gpu_metrics_url == ""


def test_the_replica_list_shows_a_disabled_replicas_last_gpu_figures_and_none_for_one_without(staff_client, gpu1):
    gpu1.enabled = False
    gpu1.save()
    Replica.objects.create(name="gpu2", base_url="http://127.11.2.4:9", model=MODEL, max_num_seqs=8, enabled=False)
    EngineSample.objects.create(replica=gpu1, taken_at=timezone.now(), gpu_count=1, gpu_util=37.4,
                                gpu_mem_used_mib=40960, gpu_mem_total_mib=81920, gpu_power_w=250.2, gpu_temp_c=55)
    EngineSample.objects.create(replica=Replica.objects.get(name="gpu2"), taken_at=timezone.now())
    page = staff_client.get("/staff/replicas/").content.decode()
    assert page.count('class="detail gpu"') == 1
    assert "1 GPU: 37% busy, 40.0 of 80.0 GiB, 250 W, 55 °C" in page


def test_naming_an_exporter_looks_at_it_once_and_says_what_it_found(staff_client, gpu1):
    with DcgmExporter() as exporter:
        response = staff_client.post("/staff/replicas/gpu1/edit/", form(gpu_metrics_url=exporter.url), follow=True)
        said = " ".join(str(m) for m in response.context["messages"])
        assert "The GPU exporter answered: 2 GPUs: 71% busy, 141 of 158 GiB, 600 W, hottest 71 °C." in said
        assert exporter.requests == 1
        staff_client.post("/staff/replicas/gpu1/edit/", form(gpu_metrics_url=exporter.url, max_num_seqs=9))
        assert exporter.requests == 1  # unchanged: not asked again
        exporter.body = b"<html>secret-token-123</html>"
        response = staff_client.post("/staff/replicas/gpu1/edit/", form(gpu_metrics_url=exporter.url + "/"),
                                     follow=True)
    said = " ".join(str(m) for m in response.context["messages"])
    assert exporter.requests == 2  # the new address was asked, and its answer not quoted
    assert "gave no GPU figures" in said and "secret-token-123" not in response.content.decode()
