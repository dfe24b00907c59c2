"""Staff set the allowed models on the tier and account pages, through the admin API and with
`manage.py add_account --models`: names validated, each change audited."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from fairness.models import MAX_ALLOWED_MODELS, Account, AuditEntry, Tier
from tests.support.audit import SETUP
from tests.support.cast import STAFF_IP
from tests.support.model_access import restrict

pytestmark = pytest.mark.django_db(transaction=True)

TIER = {
    "name": "gold", "description": "", "per_key_concurrency": 4, "pool_concurrency": "", "head_start_seconds": 0,
    "max_queue_wait_seconds": 60, "max_queued_per_key": 8, "engine_priority": 0, "fairshare_weight_seconds": 300,
    "queue_events": "on",
}
TOO_MANY = " ".join(f"m{n}" for n in range(MAX_ALLOWED_MODELS + 1))


def send(client, method: str, path: str, body: dict):
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json")


# -- the pages ----------------------------------------------------------------------------------

def test_the_tier_form_takes_names_separated_by_commas_or_spaces(staff_client):
    response = staff_client.post("/staff/tiers/new/", {**TIER, "allowed_models": "a, org/b\n  c a"})
    assert response.status_code == 302
    assert Tier.objects.get(name="gold").allowed_models == ["a", "org/b", "c"]
    entry = AuditEntry.objects.get(action="tier.create", target="gold")
    assert (entry.actor_name, entry.ip, entry.detail["allowed_models"]) == ("sam", STAFF_IP, ["a", "org/b", "c"])
    form = staff_client.get("/staff/tiers/gold/edit/").content.decode()
    assert 'name="allowed_models" value="a, org/b, c"' in form


def test_clearing_a_tiers_list_allows_every_model_and_is_audited(staff_client, tiers):
    restrict(tiers["batch"], "a")
    response = staff_client.post("/staff/tiers/batch/edit/", {**TIER, "name": "batch", "allowed_models": ""})
    assert response.status_code == 302
    assert Tier.objects.get(name="batch").allowed_models == []
    assert AuditEntry.objects.get(action="tier.update", target="batch").detail["allowed_models"] == []


def test_a_tier_edit_that_leaves_the_list_alone_does_not_audit_it(staff_client, tiers):
    restrict(tiers["batch"], "a", "b")
    response = staff_client.post("/staff/tiers/batch/edit/",
                                 {**TIER, "name": "batch", "per_key_concurrency": 3, "allowed_models": "a, b"})
    assert response.status_code == 302
    assert "allowed_models" not in AuditEntry.objects.get(action="tier.update").detail


@pytest.mark.parametrize("typed", ["a|b", TOO_MANY, "x" * 201])
def test_the_tier_form_refuses_bad_names_on_the_field(staff_client, tiers, typed):
    response = staff_client.post("/staff/tiers/batch/edit/", {**TIER, "name": "batch", "allowed_models": typed})
    assert response.status_code == 200
    assert list(response.context["form"].errors) == ["allowed_models"]
    assert Tier.objects.get(name="batch").allowed_models == []


def test_an_account_is_added_with_its_models_audited(staff_client, tiers):
    response = staff_client.post("/staff/accounts/new/", {"name": "lab", "shares": "1", "allowed_models": "a,b"})
    assert response.status_code == 302
    assert Account.objects.get(name="lab").allowed_models == ["a", "b"]
    entry = AuditEntry.objects.get(action="account.add", target="lab")
    assert entry.detail["allowed_models"] == ["a", "b"] and entry.ip == STAFF_IP


def test_an_accounts_models_change_on_its_page_audited(staff_client, lab):
    restrict(lab, "a")
    page = staff_client.get("/staff/accounts/lab/shares/").content.decode()
    assert 'name="allowed_models" value="a"' in page
    response = staff_client.post("/staff/accounts/lab/shares/", {"shares": "1", "allowed_models": "a b"})
    assert response.status_code == 302
    assert Account.objects.get(name="lab").allowed_models == ["a", "b"]
    entry = AuditEntry.objects.get(action="account.change", target="lab")
    assert entry.detail == {"allowed_models": [["a"], ["a", "b"]]} and entry.actor_name == "sam"


def test_the_account_page_refuses_a_bad_name(staff_client, lab):
    response = staff_client.post("/staff/accounts/lab/shares/", {"shares": "1", "allowed_models": "a|b"})
    assert response.status_code == 200 and "allowed_models" in response.context["form"].errors
    assert not AuditEntry.objects.filter(action="account.change").exists()


# -- the admin API ------------------------------------------------------------------------------

def test_the_tier_api_takes_and_returns_the_list(staff_client, tiers):
    response = send(staff_client, "post", "/api/admin/tiers", {"name": "gold", "allowed_models": ["a", "org/b"]})
    assert response.status_code == 201 and response.json()["allowed_models"] == ["a", "org/b"]
    response = send(staff_client, "patch", "/api/admin/tiers/gold", {"allowed_models": ["c"]})
    assert response.status_code == 200 and response.json()["allowed_models"] == ["c"]
    assert AuditEntry.objects.get(action="tier.update", target="gold").detail == {"allowed_models": ["c"]}
    response = send(staff_client, "patch", "/api/admin/tiers/gold", {"description": "kept"})
    assert response.json()["allowed_models"] == ["c"]  # left out: kept
    response = send(staff_client, "patch", "/api/admin/tiers/gold", {"allowed_models": []})
    assert response.json()["allowed_models"] == [] and Tier.objects.get(name="gold").allowed_models == []
    listing = {tier["name"]: tier for tier in staff_client.get("/api/admin/tiers").json()}
    assert listing["batch"]["allowed_models"] == []


def test_the_account_api_takes_and_returns_the_list(staff_client, tiers):
    response = send(staff_client, "post", "/api/admin/accounts", {"name": "lab", "allowed_models": ["a", "a", "b"]})
    assert response.status_code == 201 and response.json()["allowed_models"] == ["a", "b"]
    response = send(staff_client, "patch", "/api/admin/accounts/lab", {"shares": 2})
    assert response.json()["allowed_models"] == ["a", "b"]  # left out: kept
    response = send(staff_client, "patch", "/api/admin/accounts/lab", {"allowed_models": ["c"]})
    assert response.status_code == 200 and response.json()["allowed_models"] == ["c"]
    entry = AuditEntry.objects.filter(action="account.change", target="lab").latest("pk")
    assert entry.detail == {"allowed_models": [["a", "b"], ["c"]]}


@pytest.mark.parametrize(("method", "path", "body"), [
    ("post", "/api/admin/tiers", {"name": "gold", "allowed_models": ["a b"]}),
    ("patch", "/api/admin/tiers/batch", {"allowed_models": ["a|b"]}),
    ("patch", "/api/admin/tiers/batch", {"allowed_models": TOO_MANY.split()}),
    ("patch", "/api/admin/tiers/batch", {"allowed_models": "a"}),
    ("post", "/api/admin/accounts", {"name": "lab", "allowed_models": [""]}),
    ("patch", "/api/admin/accounts/other", {"allowed_models": ["a\x00"]}),
    ("patch", "/api/admin/accounts/other", {"allowed_models": TOO_MANY.split()}),
])
def test_the_api_refuses_bad_lists_with_a_422_naming_the_field(staff_client, other, method, path, body):
    audited = AuditEntry.objects.count()
    response = send(staff_client, method, path, body)
    assert response.status_code == 422, response.content
    assert "allowed_models" in response.content.decode()
    assert AuditEntry.objects.count() == audited


# -- the command --------------------------------------------------------------------------------

def run(*args, **options) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def test_add_account_takes_models(tiers):
    assert "allowing only a, b" in run("add_account", "lab", models="a,b")
    assert Account.objects.get(name="lab").allowed_models == ["a", "b"]
    assert AuditEntry.objects.get(action="account.add").detail["allowed_models"] == ["a", "b"]
    run("add_account", "lab", models="c", update=True)
    assert Account.objects.get(name="lab").allowed_models == ["c"]
    run("add_account", "lab", models="", update=True)
    assert Account.objects.get(name="lab").allowed_models == []
    changes = AuditEntry.objects.filter(action="account.change").order_by("pk")
    assert [entry.detail["allowed_models"] for entry in changes] == [[["a", "b"], ["c"]], [["c"], []]]


def test_add_account_refuses_a_bad_model_name(tiers):
    with pytest.raises(CommandError, match="allowed_models"):
        run("add_account", "lab", models="a|b")
    assert not Account.objects.filter(name="lab").exists()


def test_a_restriction_set_by_an_action_is_validated(tiers):
    from django.core.exceptions import ValidationError

    from fairness.actions import accounts

    with pytest.raises(ValidationError):
        accounts.add_account(SETUP, "lab", allowed_models=["has space"])
