"""The gateway remembers the people a front end's key speaks for and the tokens that named them:
a remembered token still expires on the clock and holds only under the secret that checked it,
and the key as it speaks for a person follows the key when it reloads."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from django.contrib.auth import get_user_model

from fairness.gateway.api_keys import FrontEnd, _key_info
from fairness.gateway.errors import ApiError
from fairness.gateway.front_end_people import FrontEndPeople
from fairness.models import Tier
from tests.people.openwebui import SECRET, OpenWebUIUser, jwt_headers

NOW = 1_800_000_000.0
SIGNED = FrontEnd("openwebui", SECRET, trusts_plain_headers=False, adds_people=True, account_id=1)
ANNA = OpenWebUIUser("6c3f-anna", "Anna.Berg@Lab.Example", "Anna Berg")


@dataclasses.dataclass
class Clock:
    now: float = NOW

    def __call__(self) -> float:
        return self.now


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def refusal(people: FrontEndPeople, key_id: int, front_end: FrontEnd, headers: dict[str, str]) -> ApiError:
    with pytest.raises(ApiError) as refused:
        people.named_email(key_id, front_end, headers)
    return refused.value


def test_a_remembered_token_still_expires_on_the_clock() -> None:
    clock = Clock()
    people = FrontEndPeople(60.0, wall=clock)
    headers = lower(jwt_headers(ANNA, now=NOW))
    assert people.named_email(1, SIGNED, headers) == ("anna.berg@lab.example", "Anna Berg")
    clock.now = NOW + 299
    assert people.named_email(1, SIGNED, headers) == ("anna.berg@lab.example", "Anna Berg")
    clock.now = NOW + 300
    refused = refusal(people, 1, SIGNED, headers)
    assert (refused.status, refused.code) == (401, "expired_user_token")


def test_a_remembered_token_holds_only_under_the_secret_that_checked_it() -> None:
    people = FrontEndPeople(60.0, wall=Clock())
    headers = lower(jwt_headers(ANNA, now=NOW))
    assert people.named_email(1, SIGNED, headers)[0] == "anna.berg@lab.example"
    rotated = dataclasses.replace(SIGNED, jwt_secret="another-secret-of-at-least-32-bytes!!")
    for key_id in (1, 2):  # the same key after staff changed its secret, and another key
        refused = refusal(people, key_id, rotated, headers)
        assert (refused.status, refused.code) == (401, "invalid_user_token")


def test_the_key_as_it_speaks_for_a_person_follows_the_key_when_it_reloads(front_end_key, tiers) -> None:
    people = FrontEndPeople(60.0)
    headers = lower(jwt_headers(ANNA))
    loaded = _key_info(pk=front_end_key.key_id)
    assert loaded is not None
    first = asyncio.run(people.speak_for(loaded, headers))
    anna = get_user_model().objects.get(email="anna.berg@lab.example")
    assert (first.person_id, first.tier.per_key_concurrency) == (anna.pk, loaded.tier.per_key_concurrency)
    Tier.objects.filter(name="interactive").update(per_key_concurrency=loaded.tier.per_key_concurrency + 3)
    reloaded = _key_info(pk=front_end_key.key_id)
    assert reloaded is not None
    after = asyncio.run(people.speak_for(reloaded, headers))
    assert (after.person_id, after.tier.per_key_concurrency) == (anna.pk, loaded.tier.per_key_concurrency + 3)
    assert after.unit == first.unit == f"p{anna.pk}.interactive"
