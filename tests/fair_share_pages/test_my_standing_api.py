"""GET /api/me/standing: a person's own `sshare -u me` and `sprio`, by their API key or their
session. It names nobody else, takes no parameter that could, and refuses a key /v1/ would
refuse with the same OpenAI-shaped 401."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from fairness.actions import budgets
from fairness.models import ApiKey, Tier
from tests.support.accounts import LabTree, charge, lab_tree
from tests.support.audit import SETUP
from tests.support.budgets import use

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/me/standing"
User = get_user_model()
F_ALICE = 2 ** -2.5  # all of the usage against a share of 40%


@pytest.fixture
def charged(cast) -> LabTree:
    """alice's key charges nlp (40% of the card: lab's 2 of 5 shares, nlp its only child, alice its
    only member); she has used all of the usage there is, 2.5× her share."""
    tree = lab_tree(keys_in_tree=True)
    charge((tree.alice, 1000.0))
    return tree


def with_key(secret: str, **query: str):
    return Client().get(URL, query, HTTP_AUTHORIZATION=f"Bearer {secret}")


def test_a_key_reads_its_owners_accounts_shares_usage_and_factor(cast, charged):
    response = with_key(cast["alice"].secret)
    assert response.status_code == 200
    body = response.json()
    assert body["user"] == "alice"
    nlp, own = body["accounts"]  # the default first
    assert (nlp["account"], nlp["is_default"], nlp["shares"], nlp["account_shares"]) == ("nlp", True, 1, 1)
    assert nlp["norm_shares"] == pytest.approx(0.4) and nlp["account_norm_shares"] == pytest.approx(0.4)
    # Usage decays (a week's half-life) in the moments between the charge and the read.
    assert nlp["usage"] == pytest.approx(1000.0, rel=1e-4) and nlp["account_usage"] == pytest.approx(1000.0, rel=1e-4)
    assert nlp["effective_usage"] == pytest.approx(1.0)
    assert nlp["fair_share"] == pytest.approx(F_ALICE, rel=1e-4)
    assert nlp["usage_over_share"] == pytest.approx(2.5, rel=1e-4)
    assert nlp["words"].startswith("In nlp you used 2.5× your share lately")
    assert (own["account"], own["usage"], own["fair_share"]) == ("alice", 0.0, 1.0)
    assert body["half_life_hours"] == 168.0
    assert body["weights"] == {"prompt": 1.0, "cached_prompt": 0.1, "completion": 2.0,
                               "sentence": body["weights"]["sentence"]}


def test_the_rank_of_a_request_sent_now_is_its_head_start_less_what_fair_share_takes(cast, charged):
    Tier.objects.filter(name="interactive").update(head_start_seconds=600.0, fairshare_weight_seconds=300.0)
    [rank] = with_key(cast["alice"].secret).json()["priority"]
    prefix = ApiKey.objects.get(pk=cast["alice"].key_id).prefix
    assert (rank["key"], rank["tier"], rank["account"]) == (prefix, "interactive", "nlp")
    assert (rank["age"], rank["head_start"], rank["fair_share_weight"]) == (0.0, 600.0, 300.0)
    assert rank["fair_share_factor"] == pytest.approx(F_ALICE, rel=1e-4)
    assert rank["fair_share"] == pytest.approx(-300.0 * (1 - F_ALICE), rel=1e-4)
    assert rank["priority"] == pytest.approx(600.0 - 300.0 * (1 - F_ALICE), rel=1e-4)
    assert (rank["running"], rank["running_cap"], rank["waiting"]) == (0, 2, 0)
    assert "600" not in rank["words"] and "10 minutes of head start, less 4 minutes 7 seconds for fair share" \
        in rank["words"]

    # bob has used nothing: the whole head start is his, on a tier that gives none the rank is 0.
    [bob] = with_key(cast["bob"].secret).json()["priority"]
    assert (bob["fair_share_factor"], bob["fair_share"], bob["priority"]) == (1.0, 0.0, 600.0)
    [carol] = with_key(cast["carol"].secret).json()["priority"]
    assert (carol["tier"], carol["head_start"], carol["priority"]) == ("batch", 0.0, 0.0)


def test_budgets_over_the_person_show_what_is_left(cast, charged):
    lab = budgets.set_budget(SETUP, account=charged.lab, tokens=10_000, period="month")
    mine = budgets.set_budget(SETUP, membership=charged.alice, tokens=2_000, period="day")
    key = budgets.set_budget(SETUP, key=ApiKey.objects.get(pk=cast["alice"].key_id), tokens=500, period="week")
    bobs = budgets.set_budget(SETUP, key=ApiKey.objects.get(pk=cast["bob"].key_id), tokens=7, period="week")
    use(lab, 2_500, reserved=500)
    body = with_key(cast["alice"].secret).json()
    nlp = body["accounts"][0]
    lines = {line["id"]: line for line in nlp["budgets"]}
    assert set(lines) == {lab.pk, mine.pk}  # the account above nlp holds her too
    assert (lines[lab.pk]["used"], lines[lab.pk]["reserved"], lines[lab.pk]["left"]) == (2500.0, 500.0, 7000.0)
    assert body["accounts"][1]["budgets"] == []
    assert [line["id"] for line in body["key_budgets"]] == [key.pk]
    assert bobs.pk not in {line["id"] for line in body["key_budgets"]}


def test_a_signed_in_session_reads_the_same_without_a_csrf_token(cast, charged):
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.get(username="alice"))
    response = client.get(URL)
    assert response.status_code == 200
    assert response.json()["accounts"][0]["account"] == "nlp"


def test_one_researcher_cannot_read_anothers_standing(cast, charged):
    """bob's key and bob's session answer about bob, whatever the request names; nothing of
    alice's (her name, her account, her usage) reaches him."""
    bob = Client()
    bob.force_login(User.objects.get(username="bob"))
    answers = [
        with_key(cast["bob"].secret),
        with_key(cast["bob"].secret, user="alice", username="alice", account="nlp"),
        bob.get(URL, {"user": "alice"}),
        bob.get(URL + "?user=alice", HTTP_AUTHORIZATION="Bearer " + cast["bob"].secret),
    ]
    for response in answers:
        assert response.status_code == 200
        body = response.json()
        assert body["user"] == "bob"
        text = json.dumps(body)
        for hers in ("alice", "nlp", "lab", "1000", "999"):
            assert not re.search(rf"\b{hers}\b", text), hers
    # No parameter in the schema could name anyone: the endpoint has none.
    schema = Client().get("/api/openapi.json").json()
    assert schema["paths"][URL]["get"].get("parameters", []) == []
    # Nor another path under /api/me/ that takes one.
    assert Client().get("/api/me/standing/alice", HTTP_AUTHORIZATION="Bearer " + cast["bob"].secret).status_code \
        == 404


def refusal(response, code: str) -> None:
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="gpuportal"'
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("authentication_error", code)
    assert error["message"]


def test_a_key_v1_would_refuse_is_refused_here_too(cast, charged):
    ApiKey.objects.filter(pk=cast["alice"].key_id).update(revoked_at=timezone.now())
    refusal(with_key(cast["alice"].secret), "revoked_api_key")
    ApiKey.objects.filter(pk=cast["bob"].key_id).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    refusal(with_key(cast["bob"].secret), "expired_api_key")
    User.objects.filter(username="carol").update(is_active=False)
    refusal(with_key(cast["carol"].secret), "owner_inactive")
    refusal(with_key("gp-" + "x" * 40), "invalid_api_key")
    refusal(Client().get(URL, HTTP_AUTHORIZATION="Basic YWxpY2U6c2VjcmV0"), "invalid_api_key")


def test_without_a_key_or_a_session_it_answers_401_in_openais_shape(cast, charged):
    refusal(Client().get(URL), "missing_api_key")
    deactivated = Client()
    deactivated.force_login(User.objects.get(username="alice"))
    User.objects.filter(username="alice").update(is_active=False)
    refusal(deactivated.get(URL), "missing_api_key")


def test_a_staff_member_reads_only_their_own_standing_too(cast, charged, staff):
    """Staff have the whole tree elsewhere (/api/admin/accounts); here they are one more person."""
    client = Client()
    client.force_login(staff)
    body = client.get(URL).json()
    assert body["user"] == "sam" and body["accounts"] == [] and body["priority"] == []
    assert "alice" not in json.dumps(body)


def test_a_person_at_their_tiers_cap_is_told_a_new_request_waits_for_their_own(cast, charged, redis_client):
    from fairness.store.keyspace import ADMISSION_IN_FLIGHT_BY_KEY, ADMISSION_NAMESPACE, ADMISSION_QUEUED_BY_KEY

    unit = f"p{cast['alice'].user_id}.interactive"  # admission counts her keys of the tier together
    redis_client.hset(ADMISSION_NAMESPACE + ADMISSION_IN_FLIGHT_BY_KEY, unit, 2)
    redis_client.hset(ADMISSION_NAMESPACE + ADMISSION_QUEUED_BY_KEY, unit, 3)
    [rank] = with_key(cast["alice"].secret).json()["priority"]
    assert (rank["running"], rank["running_cap"], rank["waiting"]) == (2, 2, 3)
    assert "You run 2 of the 2 requests interactive lets you run at once" in rank["words"]
    [bob] = with_key(cast["bob"].secret).json()["priority"]
    assert (bob["running"], bob["waiting"]) == (0, 0) and "You run" not in bob["words"]
