"""The admin API's budgets: the listing with what is used, held and left; setting one (or a raise)
and removing one through the audited actions, with the API's usual answers; and only staff may."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.test import Client
from django.utils import timezone

from fairness.actions import budgets
from fairness.actions.audit import Actor
from fairness.actions.tokens import issue_admin_token
from fairness.models import ApiKey, AuditEntry, Budget
from tests.support.audit import SETUP
from tests.support.budgets import use
from tests.support.cast import STAFF_IP

pytestmark = pytest.mark.django_db(transaction=True)


def send(client: Client, method: str, path: str, body=None, **headers):
    if body is None:
        return getattr(client, method)(path, **headers)
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json", **headers)


def test_the_listing_says_what_is_used_held_and_left(staff_client, tree):
    budget = budgets.set_budget(SETUP, account=tree.nlp, tokens=1000, period="month")
    use(budget, 600, 50)
    (row,) = send(staff_client, "get", "/api/admin/budgets").json()
    assert row["id"] == budget.pk and row["holder_kind"] == "account" and row["account"] == "nlp"
    assert (row["used"], row["reserved"], row["left"]) == (600, 50, 350)
    assert row["fraction"] == pytest.approx(0.65) and 0 <= row["elapsed"] <= 1 and row["in_force"]
    assert dt.datetime.fromisoformat(row["resets_at"]) > timezone.now()
    assert row["words"].startswith("nlp has used 65% of its 1,000 tokens for ")


def test_staff_set_a_users_budget_and_a_raise_then_remove_it_audited(staff_client, tree):
    made = send(staff_client, "post", "/api/admin/budgets",
                {"user": "alice", "account": "nlp", "tokens": 2000, "period": "week"})
    assert made.status_code == 201, made.content
    assert made.json()["holder"] == "alice in nlp" and made.json()["user"] == "alice"
    day = (timezone.localdate() + dt.timedelta(days=2)).isoformat()
    raised = send(staff_client, "post", "/api/admin/budgets",
                  {"user": "alice", "tokens": 9000, "period": "week", "until": day})
    assert raised.status_code == 201 and raised.json()["until"] is not None
    listing = {r["id"]: r for r in send(staff_client, "get", "/api/admin/budgets").json()}
    assert listing[made.json()["id"]]["in_force"] is False and listing[raised.json()["id"]]["in_force"]
    entry = AuditEntry.objects.filter(action="budget.set").latest("pk")
    assert entry.actor_name == "sam" and entry.ip == STAFF_IP and entry.detail["tokens"] == 9000
    gone = send(staff_client, "delete", f"/api/admin/budgets/{raised.json()['id']}")
    assert gone.status_code == 204
    assert list(Budget.objects.values_list("tokens", flat=True)) == [2000]
    assert AuditEntry.objects.filter(action="budget.remove", actor_name="sam").exists()


def test_a_keys_rolling_budget_by_prefix(staff_client, tree, cast):
    prefix = ApiKey.objects.get(pk=cast["carol"].key_id).prefix
    made = send(staff_client, "post", "/api/admin/budgets",
                {"key": prefix, "tokens": 50, "period": "rolling", "window_hours": 24})
    assert made.status_code == 201 and made.json()["key"] == prefix and made.json()["window_hours"] == 24


@pytest.mark.parametrize(("method", "path", "body", "status", "words"), [
    ("post", "/api/admin/budgets", {"account": "nowhere", "tokens": 5}, 422, "holder: No account named"),
    ("post", "/api/admin/budgets", {"user": "mallory", "tokens": 5}, 422, "holder: No user named"),
    ("post", "/api/admin/budgets", {"user": "alice", "account": "lab", "tokens": 5}, 422, "account: alice is not"),
    ("post", "/api/admin/budgets", {"key": "gp-nothing", "tokens": 5}, 422, "holder: No key starts"),
    ("post", "/api/admin/budgets", {"tokens": 5}, 422, "holder"),
    ("post", "/api/admin/budgets", {"account": "lab", "tokens": 0}, 422, "tokens"),
    ("post", "/api/admin/budgets", {"account": "lab", "tokens": 5, "period": "year"}, 422, "period"),
    ("post", "/api/admin/budgets", {"account": "lab", "tokens": 5, "period": "rolling"}, 422,
     "window_hours: A rolling budget needs"),
    ("post", "/api/admin/budgets", {"account": "lab", "tokens": 5, "until": "2001-01-01"}, 422,
     "until: A raise ends in the future"),
    ("delete", "/api/admin/budgets/999999", None, 404, ""),
])
def test_mistakes_get_the_apis_usual_answers_and_change_nothing(staff_client, tree, method, path, body, status,
                                                                words):
    response = send(staff_client, method, path, body)
    assert response.status_code == status, response.content
    assert "detail" in response.json() and words in response.content.decode()
    assert not Budget.objects.exists() and not AuditEntry.objects.filter(action__startswith="budget").exists()


@pytest.fixture
def callers(cast, researcher_client) -> dict[str, tuple[Client, dict]]:
    return {
        "no token": (Client(), {}),
        "a researcher's session": (researcher_client, {}),
        "a researcher's API key": (Client(), {"HTTP_AUTHORIZATION": f"Bearer {cast['alice'].secret}"}),
    }


@pytest.mark.parametrize("caller", ["no token", "a researcher's session", "a researcher's API key"])
def test_only_staff_may_read_or_change_budgets(callers, caller, tree):
    budget = budgets.set_budget(SETUP, account=tree.nlp, tokens=10, period="day")
    client, headers = callers[caller]
    for method, path, body in (("get", "/api/admin/budgets", None),
                               ("post", "/api/admin/budgets", {"user": "alice", "tokens": 10**9}),
                               ("delete", f"/api/admin/budgets/{budget.pk}", None)):
        response = send(client, method, path, body, **headers)
        assert response.status_code in (401, 403), (method, response.content)
        assert "used" not in response.content.decode()
    assert list(Budget.objects.values_list("pk", "tokens")) == [(budget.pk, 10)]


def test_an_admin_token_is_served(staff, tree):
    token = issue_admin_token(Actor(staff), staff, "ci")[1]
    response = send(Client(), "post", "/api/admin/budgets", {"account": "lab", "tokens": 10},
                    HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201 and response.json()["period"] == "month"
