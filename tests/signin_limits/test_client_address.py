"""The address the sign-in limit and the audit log go by: the connection's, or a trusted proxy's word.

A client can write any X-Forwarded-For it likes. Only uvicorn, for proxies it is told to trust
(--forwarded-allow-ips; 127.0.0.1 by default), turns that header into the request's address.
"""

from __future__ import annotations

import re

import httpx
import pytest
import redis
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.models import AuditEntry
from fairness.store import keyspace
from tests.support.cast import STAFF_IP

pytestmark = pytest.mark.django_db(transaction=True)

FORGED = "127.198.100.7"


@pytest.fixture(autouse=True)
def clean_cache(redis_url):
    from django.core.cache import cache

    cache.clear()


def _counted(client: redis.Redis, address: str) -> int:
    return int(client.get(keyspace.signin_attempts_by_address(address)) or 0)


def _any_key_names(client: redis.Redis, address: str) -> bool:
    return any(address.encode() in key for key in client.scan_iter())


def test_a_forged_forwarded_for_is_counted_and_audited_under_the_real_address(redis_client, staff_client, staff):
    wrong = Client(REMOTE_ADDR="127.10.0.9").post("/accounts/login/", {"username": "sam", "password": "x"},
                                                 HTTP_X_FORWARDED_FOR=FORGED)
    assert wrong.status_code == 200
    assert _counted(redis_client, "127.10.0.9") == 1
    assert not _any_key_names(redis_client, FORGED)

    staff_client.post("/staff/users/new/", {"username": "dora"}, HTTP_X_FORWARDED_FOR=FORGED)
    staff_client.post("/api/admin/users", {"username": "eve"}, content_type="application/json",
                      HTTP_X_FORWARDED_FOR=FORGED)
    assert [(e.action, e.ip) for e in AuditEntry.objects.order_by("pk")] == [
        ("user.create", STAFF_IP), ("user.create", STAFF_IP)]


def _csrf(page: httpx.Response) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)


def test_behind_a_trusted_proxy_the_address_it_appended_counts_not_the_one_the_client_wrote(
        gateway, redis_client, staff):
    # The session gateway is uvicorn with its default --forwarded-allow-ips (127.0.0.1): this test
    # is the proxy. The client wrote FORGED; the proxy appended the address it saw.
    proxied = {"X-Forwarded-For": f"{FORGED}, 127.203.113.9"}
    with httpx.Client(base_url=gateway.url, headers=proxied) as browser:
        form = browser.get("/accounts/login/")
        wrong = browser.post("/accounts/login/", data={"username": "sam", "password": "x",
                                                       "csrfmiddlewaretoken": _csrf(form)})
        assert wrong.status_code == 200
        assert _counted(redis_client, "127.203.113.9") == 1
        assert not _any_key_names(redis_client, FORGED)

        form = browser.get("/accounts/login/")
        signed_in = browser.post("/accounts/login/", data={"username": "sam", "password": "a long staff password",
                                                           "csrfmiddlewaretoken": _csrf(form)})
        assert signed_in.status_code == 302
        page = browser.get("/staff/users/new/")
        browser.post("/staff/users/new/", data={"username": "dora", "csrfmiddlewaretoken": _csrf(page)})
    assert get_user_model().objects.filter(username="dora").exists()
    assert AuditEntry.objects.get(action="user.create").ip == "127.203.113.9"
