"""A front end's key held below its tier: its own rate counts every person it names together (the
key's limit is the key's, whoever asks)."""

from __future__ import annotations

import httpx

from fairness.actions.keys import set_limits
from fairness.models import ApiKey, KeyLimits
from tests.people.openwebui import OpenWebUIUser, jwt_headers
from tests.support.audit import SETUP
from tests.support.cast import MODEL
from tests.support.v1_calls import assert_error

ANNA = OpenWebUIUser("u-anna", "anna@lab.example", "Anna Berg")
BEN = OpenWebUIUser("u-ben", "ben@lab.example", "Ben Okafor")
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def test_a_front_ends_own_rate_holds_across_the_people_it_names(gateway, front_end_key, on_engine8):
    set_limits(SETUP, ApiKey.objects.select_related("tier").get(pk=front_end_key.key_id),
               KeyLimits(requests_per_minute=20))  # a burst of one, then one each 3 s

    def ask(person: OpenWebUIUser) -> httpx.Response:
        return httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, timeout=30,
                          headers={"authorization": f"Bearer {front_end_key.secret}", **jwt_headers(person)})

    assert ask(ANNA).status_code == 200
    error = assert_error(ask(BEN), 429, "rate_limited")  # Ben's first, but the key's second
    assert "this key's 20 requests a minute" in error["message"]
