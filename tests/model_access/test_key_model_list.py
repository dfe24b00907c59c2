"""A key given fewer models than its tier, through a live gateway: a tier-allowed model outside the
key's list is a 403 model_not_allowed, /v1/models lists only the key's, and a change reaches a
gateway that has the key cached within a second or so (the config epoch)."""

from __future__ import annotations

import httpx
import pytest

from fairness.actions.keys import set_limits
from fairness.models import ApiKey, KeyLimits, Replica
from tests.support.audit import SETUP
from tests.support.cast import MODEL
from tests.support.model_access import OTHER_MODEL
from tests.support.polling import wait_for
from tests.support.v1_calls import CHAT, assert_error, post


@pytest.fixture
def two_models(replica, sim) -> Replica:
    """A second model beside "sim", which the tier allows as it allows every model."""
    return Replica.objects.create(name="sim-b", base_url=sim.url, model=OTHER_MODEL, max_num_seqs=8)


def listed(gateway, secret: str) -> list[str]:
    response = httpx.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {secret}"}, timeout=30)
    assert response.status_code == 200, response.text
    return sorted(model["id"] for model in response.json()["data"])


def keep_only(member, *models: str) -> None:
    set_limits(SETUP, ApiKey.objects.select_related("tier").get(pk=member.key_id),
               KeyLimits(allowed_models=models))


def test_a_key_narrowed_to_one_model_is_refused_the_tiers_other_and_lists_only_its_own(cast, two_models, gateway):
    alice, bob = cast["alice"].secret, cast["bob"].secret
    assert listed(gateway, alice) == sorted([MODEL, OTHER_MODEL])  # cached with the tier's models
    keep_only(cast["alice"], OTHER_MODEL)
    wait_for(lambda: listed(gateway, alice) == [OTHER_MODEL], timeout=5, what="the key's list to reach the gateway")
    error = assert_error(post(gateway, alice, CHAT), 403, "model_not_allowed")
    assert f"'{MODEL}'" in error["message"] and "the key's own model list" in error["message"]
    assert error["param"] == "model"
    assert_error(httpx.get(gateway.url + f"/v1/models/{MODEL}", headers={"authorization": f"Bearer {alice}"},
                           timeout=30), 404, "model_not_found")
    # bob's key, of the same tier, keeps every model.
    assert listed(gateway, bob) == sorted([MODEL, OTHER_MODEL])
    assert post(gateway, bob, CHAT).status_code == 200


def test_a_key_given_back_the_tiers_models_may_use_them_again(cast, two_models, gateway):
    keep_only(cast["alice"], OTHER_MODEL)
    alice = cast["alice"].secret
    assert_error(post(gateway, alice, CHAT), 403, "model_not_allowed")
    keep_only(cast["alice"])
    wait_for(lambda: post(gateway, alice, CHAT).status_code == 200, timeout=5, what="the key's list to be lifted")
