"""A replica's address and engine key are checked on the model, so every door refuses the same:
the staff pages, the admin API, `add_replica` and the Django admin."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from fairness.models import Replica

pytestmark = pytest.mark.django_db(transaction=True)

BAD_ADDRESSES = [
    ("ftp://127.11.2.3:9", "http:// or https://"),
    ("http://admin:hunter2@127.11.2.3:9", "no user name or password"),
    ("http://127.11.2.3:9/?target=http://metadata.invalid", "query"),
    ("http://127.11.2.3:9/#v1", "fragment"),
]
INJECTING_KEY = "engine-key\r\nX-Injected: yes"


@pytest.mark.parametrize(("url", "reason"), BAD_ADDRESSES, ids=["scheme", "userinfo", "query", "fragment"])
def test_the_model_refuses_an_address_that_is_not_a_plain_engine_url(url, reason):
    with pytest.raises(ValidationError) as refused:
        Replica(name="gpu1", base_url=url, model="tiny").full_clean()
    assert reason in " ".join(refused.value.message_dict["base_url"])


@pytest.mark.parametrize("url", ["http://127.11.2.3:9", "https://engine.invalid:8443/prefix", "http://localhost:8101"])
def test_plain_http_and_https_addresses_are_accepted(url):
    Replica(name="gpu1", base_url=url, model="tiny").full_clean()


@pytest.mark.parametrize("key", [INJECTING_KEY, "engine-key\n", "engine\x00key", "engine\tkey"])
def test_the_model_refuses_an_engine_key_with_control_characters(key):
    with pytest.raises(ValidationError) as refused:
        Replica(name="gpu1", base_url="http://127.11.2.3:9", model="tiny", api_key=key).full_clean()
    assert "control characters" in " ".join(refused.value.message_dict["api_key"])


def form_fields(**changes) -> dict:
    return {"name": "gpu1", "base_url": "http://127.11.2.3:9", "model": "tiny", "engine_kind": "vllm",
            "max_num_seqs": 8, "scheduling_policy": "fcfs", "api_key": "", **changes}


def test_the_staff_form_refuses_them_on_their_fields(staff_client):
    response = staff_client.post("/staff/replicas/new/", form_fields(
        base_url="http://admin:hunter2@127.11.2.3:9", api_key=INJECTING_KEY))
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "no user name or password" in " ".join(errors["base_url"])
    assert "control characters" in " ".join(errors["api_key"])
    assert not Replica.objects.exists()


def test_the_admin_api_refuses_them_with_a_422(staff_client):
    def add(**fields) -> tuple[int, str]:
        body = {"name": "gpu1", "base_url": "http://127.11.2.3:9", "model": "tiny", **fields}
        response = staff_client.post("/api/admin/replicas", data=json.dumps(body), content_type="application/json")
        return response.status_code, response.content.decode()

    status, text = add(base_url="http://127.11.2.3:9/?a=1")
    assert status == 422 and "base_url" in text and "query" in text
    status, text = add(api_key=INJECTING_KEY)
    assert status == 422 and "api_key" in text and "control characters" in text
    assert not Replica.objects.exists()


def test_add_replica_refuses_them_naming_the_field(tiers):
    def add(*args: str) -> None:
        call_command("add_replica", "--name", "gpu1", "--model", "tiny", "--max-num-seqs", "8", *args,
                     stdout=io.StringIO())

    with pytest.raises(CommandError, match="base_url: .*http:// or https://"):
        add("--url", "ftp://127.11.2.3:9")
    with pytest.raises(CommandError, match="api_key: .*control characters"):
        add("--url", "http://127.11.2.3:9", "--api-key", INJECTING_KEY)
    assert not Replica.objects.exists()


def test_the_django_admin_refuses_them(tiers):
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("root", password="a long root password"))
    response = admin.post("/admin/fairness/replica/add/", {
        **form_fields(base_url="http://127.11.2.3:9/#v1", api_key=INJECTING_KEY), "enabled": "on"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Leave out the fragment" in page and "control characters" in page
    assert not Replica.objects.exists()
