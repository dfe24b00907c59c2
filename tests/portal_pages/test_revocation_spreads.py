"""Revoking on the page stops the key on every gateway process within a second."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.support.key_forms import key_form
from tests.support.processes import start_gateway

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = re.compile(r'<code id="secret">(gp-[^<]+)</code>')
DEADLINE_SECONDS = 1.0


def status(gateway_url: str, secret: str) -> int:
    return httpx.get(gateway_url + "/v1/models", headers={"Authorization": f"Bearer {secret}"}, timeout=5).status_code


def test_a_revocation_reaches_every_gateway_within_a_second(staff_client, cast, replica, live_db_url):
    # Caches that keep a key for a minute: only the epoch check (every 0.5 s) can end it sooner.
    gateways = [start_gateway(live_db_url, f"revoke-{n}", GP_AUTH_EPOCH_CHECK_SECONDS="0.5",
                              GP_KEY_CACHE_SECONDS="60") for n in (1, 2)]
    try:
        page = staff_client.post("/staff/keys/issue/", key_form(owner="carol", tier="batch"))
        secret = SECRET.search(page.content.decode()).group(1)
        for gw in gateways:  # each process now holds the key as valid in its cache
            assert status(gw.url, secret) == 200

        started = time.monotonic()
        assert staff_client.post(f"/staff/keys/{secret[:11]}/revoke/").status_code == 302
        refused_after: dict[str, float] = {}
        while len(refused_after) < len(gateways) and time.monotonic() - started < DEADLINE_SECONDS:
            for gw in gateways:
                if gw.url not in refused_after and status(gw.url, secret) == 401:
                    refused_after[gw.url] = time.monotonic() - started
        assert len(refused_after) == len(gateways), f"still accepted after {DEADLINE_SECONDS} s: {refused_after}"
        body = httpx.get(gateways[0].url + "/v1/models", headers={"Authorization": f"Bearer {secret}"}).json()
        assert body["error"]["code"] == "revoked_api_key"
    finally:
        for gw in gateways:
            gw.stop()
