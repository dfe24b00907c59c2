"""Which models a key may use: its tier, its account and every account above it must each allow
a model, an empty list allowing every model; the restriction nearest the key is named."""

from __future__ import annotations

import asyncio

import pytest

from fairness.gateway.api_keys import _load, hash_secret
from fairness.gateway.model_access import ModelAccess, model_access_of
from fairness.models import ApiKey
from tests.support.model_access import key_in, restrict

pytestmark = pytest.mark.django_db


def test_no_list_anywhere_allows_every_model(tiers, proj):
    key, _ = key_in(proj, tiers["batch"], "ann")
    access = model_access_of(key)
    assert access.allowed is None and access.allows("anything") and access.refused_by("anything") is None


def test_the_tier_alone_restricts(tiers, proj):
    restrict(tiers["batch"], "a", "b")
    key, _ = key_in(proj, tiers["batch"], "ann")
    access = model_access_of(key)
    assert access.allowed == {"a", "b"}
    assert access.allows("a") and not access.allows("c")
    assert access.refused_by("c") == "the batch tier"


def test_the_account_alone_restricts(tiers, proj):
    restrict(proj, "a")
    key, _ = key_in(proj, tiers["batch"], "ann")
    access = model_access_of(key)
    assert access.allowed == {"a"} and access.refused_by("b") == "account 'proj'"


def test_an_account_restricts_the_accounts_under_it(tiers, lab, proj):
    restrict(lab, "a")
    key, _ = key_in(proj, tiers["batch"], "ann")
    access = model_access_of(key)
    assert access.allowed == {"a"} and access.refused_by("b") == "account 'lab'"


def test_every_list_on_the_way_must_allow_it_and_the_nearest_refusal_is_named(tiers, lab, proj):
    restrict(tiers["batch"], "a", "b", "c")
    restrict(lab, "b", "c", "d")
    restrict(proj, "c", "b", "a")
    key, _ = key_in(proj, tiers["batch"], "ann")
    access = model_access_of(key)
    assert access.allowed == {"b", "c"}
    assert access.refused_by("a") == "account 'lab'"  # the tier and proj allow it
    assert access.refused_by("d") == "the batch tier"
    assert access.refused_by("b") is None


def test_an_account_beside_it_or_below_it_does_not_restrict_it(tiers, lab, proj, other):
    restrict(other, "a")
    restrict(proj, "a")
    key, _ = key_in(lab, tiers["batch"], "ann")
    assert model_access_of(key).allowed is None


def test_another_tier_does_not_restrict_it(tiers, proj):
    restrict(tiers["interactive"], "a")
    key, _ = key_in(proj, tiers["batch"], "ann")
    assert model_access_of(key).allowed is None


def test_a_key_naming_no_account_answers_to_its_owners_default(tiers, proj):
    restrict(proj, "a")
    key, _ = key_in(proj, tiers["batch"], "ann")
    ApiKey.objects.filter(pk=key.pk).update(membership=None)
    assert model_access_of(ApiKey.objects.get(pk=key.pk)).allowed == {"a"}


def test_empty_restrictions_allow_every_model():
    assert ModelAccess().allowed is None and ModelAccess().allows("x")


@pytest.mark.django_db(transaction=True)
def test_the_gateways_key_cache_carries_it(tiers, lab, proj):
    restrict(lab, "a", "b")
    restrict(tiers["batch"], "b", "c")
    _, secret = key_in(proj, tiers["batch"], "ann")
    info = asyncio.run(_load(hash_secret(secret)))
    assert info is not None and info.model_access.allowed == {"b"}
