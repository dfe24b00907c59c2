"""A key's secret is shown once and kept nowhere: not in the database, the session, Redis or a log."""

from __future__ import annotations

import io
import json
import logging
import re

import openai
import pytest
from django.contrib.sessions.models import Session
from django.core.management import call_command

from fairness.gateway.api_keys import hash_secret
from tests.support.cast import MODEL
from tests.support.key_forms import key_form

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = re.compile(r'<code id="secret">(gp-[^<]+)</code>')


def from_page(response) -> str:
    assert response.status_code == 200, response.content
    return SECRET.search(response.content.decode()).group(1)


def api(client, path: str, body: dict) -> dict:
    response = client.post(path, data=json.dumps(body), content_type="application/json")
    assert response.status_code in (200, 201), response.content
    return response.json()


def redis_values(client) -> str:
    """Every string and hash value in the test's Redis database, as one text."""
    parts = []
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == b"string":
            parts.append(client.get(key) or b"")
        elif kind == b"hash":
            parts.extend(k + b"=" + v for k, v in client.hgetall(key).items())
    return b"\n".join(parts).decode(errors="replace")


def test_no_secret_is_stored_or_logged_in_clear(staff_client, cast, gateway, replica, caplog, redis_client):
    caplog.set_level(logging.DEBUG)
    issued = from_page(staff_client.post("/staff/keys/issue/", key_form(owner="carol", tier="batch", label="page")))
    prefix = issued[:11]
    rotated = from_page(staff_client.post(f"/staff/keys/{prefix}/rotate/", key_form(grace_seconds=3600)))
    by_api = api(staff_client, "/api/admin/keys", {"owner": "alice", "tier": "interactive"})["secret"]
    rotated_by_api = api(staff_client, f"/api/admin/keys/{by_api[:11]}/rotate", {"grace_seconds": 0})["secret"]
    secrets = [issued, rotated, by_api, rotated_by_api]

    # Each secret goes through the gateway too, so its request and refusal paths had their chance to log.
    for secret in secrets:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
        try:
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        except openai.AuthenticationError:
            assert secret == by_api  # rotated without grace: revoked
    staff_client.get("/staff/keys/")
    staff_client.get("/staff/audit/")

    dump = io.StringIO()
    call_command("dumpdata", stdout=dump)
    sessions = "\n".join(json.dumps(s.get_decoded()) for s in Session.objects.all())
    gateway_log = gateway.log_path.read_text(errors="replace")
    places = {
        "database": dump.getvalue(), "sessions": sessions, "cookies": str(staff_client.cookies),
        "test log": caplog.text, "gateway log": gateway_log, "redis": redis_values(redis_client),
    }
    for secret in secrets:
        assert hash_secret(secret) in places["database"]  # the dump is complete: the hash is there
        for place, text in places.items():
            assert secret not in text, f"a secret is in the {place}"
            assert secret[11:] not in text, f"the hidden part of a secret is in the {place}"
