"""A key's own limits (KeyLimits): never above its tier's, carried to the gateway as the lower of
the key's and the tier's when the key is loaded, kept by a rotation, audited."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError

from fairness.actions.keys import rotate, set_limits
from fairness.gateway.api_keys import load_by_id
from fairness.gateway.lifecycle import demand_of
from fairness.models import ApiKey, AuditEntry, KeyLimits, Tier
from tests.support.audit import SETUP

pytestmark = pytest.mark.django_db(transaction=True)


def async_load(key_id: int):
    return async_to_sync(load_by_id)(key_id)


def alices(cast) -> ApiKey:
    return ApiKey.objects.select_related("tier", "owner").get(pk=cast["alice"].key_id)


def test_a_figure_above_the_tiers_is_refused_on_its_field_and_nothing_changes(cast):
    Tier.objects.filter(name="interactive").update(key_requests_per_minute=100, requests_per_minute=50)
    key = alices(cast)
    with pytest.raises(ValidationError) as refused:
        set_limits(SETUP, key, KeyLimits(max_concurrent=3, requests_per_minute=60))
    errors = refused.value.message_dict
    assert "At most 2, the interactive tier's" in errors["max_concurrent"][0]
    # The lower of the tier's per-person and tier-wide rates bounds it: it can outrun neither.
    assert "At most 50" in errors["requests_per_minute"][0]
    key.refresh_from_db()
    assert KeyLimits.of(key) == KeyLimits()
    assert not AuditEntry.objects.filter(action="key.limits").exists()


def test_models_outside_a_restricting_tier_are_refused_and_any_may_narrow_an_open_one(cast):
    Tier.objects.filter(name="interactive").update(allowed_models=["m-a", "m-b"])
    with pytest.raises(ValidationError, match="m-c: not among the interactive tier's models"):
        set_limits(SETUP, alices(cast), KeyLimits(allowed_models=("m-a", "m-c")))
    narrowed = set_limits(SETUP, alices(cast), KeyLimits(allowed_models=("m-b", "m-b")))
    assert narrowed.allowed_models == ["m-b"]  # each once
    assert set_limits(SETUP, ApiKey.objects.get(pk=cast["carol"].key_id), KeyLimits(allowed_models=("x",)))


def test_a_change_is_audited_with_before_and_after(cast):
    set_limits(SETUP, alices(cast), KeyLimits(max_concurrent=1, tokens_per_minute=5000))
    entry = AuditEntry.objects.get(action="key.limits")
    assert entry.target == alices(cast).prefix and entry.actor_name == "test-setup"
    assert entry.detail["before"]["max_concurrent"] is None
    assert entry.detail["after"] == {"max_concurrent": 1, "requests_per_minute": None, "tokens_per_minute": 5000,
                                     "allowed_models": []}


def test_a_figure_the_tier_was_lowered_under_stays_while_other_fields_change(cast):
    set_limits(SETUP, alices(cast), KeyLimits(max_concurrent=2))
    Tier.objects.filter(name="interactive").update(per_key_concurrency=1)
    key = set_limits(SETUP, alices(cast), KeyLimits(max_concurrent=2, allowed_models=("m",)))
    assert key.max_concurrent == 2
    with pytest.raises(ValidationError):  # but it cannot be raised again above the tier
        set_limits(SETUP, alices(cast), KeyLimits(max_concurrent=3))


def test_the_gateway_applies_the_lower_of_the_keys_cap_and_the_tiers(cast):
    set_limits(SETUP, alices(cast), KeyLimits(max_concurrent=1))
    info = async_load(cast["alice"].key_id)
    assert info.tier.per_key_concurrency == 1
    assert demand_of(info, "g").per_key_cap == 1
    assert async_load(cast["bob"].key_id).tier.per_key_concurrency == 2  # bob's stays the tier's
    set_limits(SETUP, alices(cast), KeyLimits(max_concurrent=2))
    tier = Tier.objects.get(name="interactive")
    tier.per_key_concurrency = 1  # lowered under the key's figure since: the tier's wins
    tier.save()
    assert async_load(cast["alice"].key_id).tier.per_key_concurrency == 1


def test_a_keys_rate_goes_to_admission_only_where_it_is_below_every_rate_of_the_tier(cast):
    Tier.objects.filter(name="interactive").update(key_requests_per_minute=100)
    set_limits(SETUP, alices(cast), KeyLimits(requests_per_minute=10, tokens_per_minute=900))
    info = async_load(cast["alice"].key_id)
    own = {limit.name: limit for limit in info.own_rate_limits}
    key_id = cast["alice"].key_id
    assert own[f"k{key_id}|rpm"].per_minute == 10 and not own[f"k{key_id}|rpm"].tokens
    assert own[f"k{key_id}|tpm"].tokens and own[f"k{key_id}|tpm"].words == "this key's 900 tokens a minute"
    assert set(own.values()) <= set(info.rate_limits)  # beside the tier's per-person limit
    assert any(limit.name.endswith("interactive|rpm") for limit in info.rate_limits)
    Tier.objects.filter(name="interactive").update(key_requests_per_minute=5)  # the tier's binds first now
    assert [limit.name for limit in async_load(key_id).own_rate_limits] == [f"k{key_id}|tpm"]


def test_the_keys_own_model_list_comes_first_in_its_model_access(cast):
    set_limits(SETUP, alices(cast), KeyLimits(allowed_models=("m-a",)))
    access = async_load(cast["alice"].key_id).model_access
    assert access.allowed == frozenset({"m-a"})
    assert access.refused_by("m-b") == "the key's own model list"
    assert async_load(cast["bob"].key_id).model_access.allowed is None


def test_a_rotation_keeps_the_keys_limits(cast):
    limits = KeyLimits(max_concurrent=1, requests_per_minute=30, allowed_models=("m-a",))
    set_limits(SETUP, alices(cast), limits)
    new, _ = rotate(SETUP, alices(cast))
    assert KeyLimits.of(new) == limits


def test_words_name_only_what_holds_the_key_below_its_tier(cast):
    tier = Tier.objects.get(name="interactive")
    assert KeyLimits(max_concurrent=2).narrowed(tier) == []  # the tier's own figure: nothing to say
    assert KeyLimits(max_concurrent=1, requests_per_minute=1500, allowed_models=("m",)).narrowed(tier) == [
        "1 at once (tier: 2)", "1,500 requests a minute (tier: no limit)", "models: m"]
