"""A front end's key through a live gateway: each person it names is a person of their own, with
their own caps, usage rows and account membership; whatever does not hold is refused."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from django.contrib.auth import get_user_model

from fairness.accounting import usage
from fairness.models import ApiKey, Membership, Replica, UsageRecord
from fairness.store.redis_clients import redis_sync
from tests.people.openwebui import OpenWebUIUser, jwt_headers, plain_headers
from tests.support.cast import MODEL
from tests.support.live_admission import admission_stats, drop, wait_async
from tests.support.polling import wait_for as eventually

ANNA = OpenWebUIUser("u-anna", "anna@lab.example", "Anna Berg")
BEN = OpenWebUIUser("u-ben", "ben@lab.example", "Ben Okafor")


def flushed() -> bool:
    usage.flush(redis_sync())
    return True


def chat(max_tokens: int = 8, stream: bool = False) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens,
            "ignore_eos": True, "stream": stream}


def headers(front_end_key, person_headers: dict[str, str]) -> dict[str, str]:
    return {"authorization": f"Bearer {front_end_key.secret}", **person_headers}


def person_stats(email: str, tier: str = "interactive") -> dict:
    user = get_user_model().objects.filter(email=email).first()
    if user is None:
        return {"in_flight": 0, "queued": 0}
    return admission_stats()["keys"].get(f"p{user.pk}.{tier}", {"in_flight": 0, "queued": 0})


def test_a_person_named_for_the_first_time_joins_the_front_ends_account_and_owns_the_usage(
    gateway, front_end_key, on_engine8
):
    answer = httpx.post(gateway.url + "/v1/chat/completions", json=chat(),
                        headers=headers(front_end_key, jwt_headers(ANNA)), timeout=30)
    assert answer.status_code == 200, answer.text
    anna = get_user_model().objects.get(email="anna@lab.example")
    assert (anna.username, anna.first_name, anna.is_staff, anna.has_usable_password()) == (
        "anna@lab.example", "Anna Berg", False, False)
    membership = Membership.objects.get(user=anna)
    assert membership.account_id == front_end_key.account_id
    row = eventually(lambda: flushed() and UsageRecord.objects.filter(key_id=front_end_key.key_id).first(),
                     what="usage row")
    assert (row.person_id, row.membership_id) == (anna.pk, membership.pk)
    # The same person again: no second account.
    again = httpx.post(gateway.url + "/v1/chat/completions", json=chat(),
                       headers=headers(front_end_key, jwt_headers(ANNA)), timeout=30)
    assert again.status_code == 200
    assert get_user_model().objects.filter(email="anna@lab.example").count() == 1


def test_one_busy_person_behind_the_front_end_does_not_hold_up_another(gateway, front_end_key, slow_engine):
    """The interactive tier's cap is 2 a person: Anna's third request waits, Ben's first runs."""
    Replica.objects.create(name="slow", base_url=slow_engine.url, model=MODEL, max_num_seqs=8)

    async def scenario():
        async with httpx.AsyncClient(timeout=60) as client:
            async def send(person: OpenWebUIUser) -> httpx.Response:
                async with client.stream("POST", gateway.url + "/v1/chat/completions", json=chat(4000, True),
                                         headers=headers(front_end_key, jwt_headers(person))) as response:
                    await response.aread()
                    return response

            annas = [asyncio.create_task(send(ANNA)) for _ in range(3)]
            await wait_async(lambda: person_stats(ANNA.email) == {"in_flight": 2, "queued": 1})
            bens = asyncio.create_task(send(BEN))
            await wait_async(lambda: person_stats(BEN.email)["in_flight"] == 1)
            still = await asyncio.to_thread(person_stats, ANNA.email)
            await drop([*annas, bens])
            return still

    assert asyncio.run(scenario()) == {"in_flight": 2, "queued": 1}


def test_listing_models_names_nobody(gateway, front_end_key, on_engine8):
    listed = httpx.get(gateway.url + "/v1/models", headers=headers(front_end_key, {}), timeout=10)
    assert listed.status_code == 200 and [m["id"] for m in listed.json()["data"]] == [MODEL]


@pytest.mark.parametrize(("why", "person_headers", "status", "code"), [
    ("no person", {}, 401, "invalid_user_token"),
    ("forged", jwt_headers(ANNA, secret="not-the-front-ends-secret-but-long-enough"), 401, "invalid_user_token"),
    ("expired", jwt_headers(ANNA, expires_seconds=-1), 401, "expired_user_token"),
    ("plain headers, not trusted", plain_headers(ANNA), 401, "invalid_user_token"),
])
def test_a_request_that_names_nobody_it_may_speak_for_is_refused(
    gateway, front_end_key, on_engine8, engine8, why, person_headers, status, code
):
    answer = httpx.post(gateway.url + "/v1/chat/completions", json=chat(),
                        headers=headers(front_end_key, person_headers), timeout=30)
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), why
    assert engine8.requests() == [] and not get_user_model().objects.filter(email=ANNA.email).exists()


def test_a_front_end_cannot_speak_for_staff_or_for_a_deactivated_person(gateway, front_end_key, on_engine8):
    get_user_model().objects.create(username="root", email="root@lab.example", is_staff=True, is_superuser=True)
    root = OpenWebUIUser("u-root", "root@lab.example", "Root")
    answer = httpx.post(gateway.url + "/v1/chat/completions", json=chat(),
                        headers=headers(front_end_key, jwt_headers(root)), timeout=30)
    assert (answer.status_code, answer.json()["error"]["code"]) == (403, "staff_person")
    assert not Membership.objects.filter(user__username="root").exists()

    assert httpx.post(gateway.url + "/v1/chat/completions", json=chat(),
                      headers=headers(front_end_key, jwt_headers(ANNA)), timeout=30).status_code == 200
    anna = get_user_model().objects.get(email=ANNA.email)
    anna.is_active = False
    anna.save()

    def refused() -> httpx.Response | None:
        answer = httpx.post(gateway.url + "/v1/chat/completions", json=chat(),
                            headers=headers(front_end_key, jwt_headers(ANNA)), timeout=30)
        return answer if answer.status_code == 401 else None

    assert eventually(refused, what="Anna refused once deactivated").json()["error"]["code"] == "owner_inactive"


def test_a_key_that_adds_nobody_refuses_a_stranger_and_trusted_plain_headers_name_a_person(
    gateway, front_end_key, on_engine8
):
    ApiKey.objects.filter(pk=front_end_key.key_id).update(front_end_adds_people=False,
                                                          front_end_trusts_plain_headers=True)
    ApiKey.objects.get(pk=front_end_key.key_id).save()

    def answer(person_headers: dict[str, str]) -> httpx.Response:
        return httpx.post(gateway.url + "/v1/chat/completions", json=chat(),
                          headers=headers(front_end_key, person_headers), timeout=30)

    stranger = eventually(lambda: (r := answer(plain_headers(ANNA))).status_code == 403 and r,
                          what="the stranger refused")
    assert stranger.json()["error"]["code"] == "unknown_person"
    anna = get_user_model().objects.create(username="anna", email=ANNA.email)
    Membership.objects.create(user=anna, account_id=front_end_key.account_id, is_default=True)
    assert eventually(lambda: answer(plain_headers(ANNA)).status_code == 200, what="a known member served")


def test_a_front_ends_key_reaches_no_files_or_batches(gateway, front_end_key, on_engine8):
    listed = httpx.get(gateway.url + "/v1/files", headers=headers(front_end_key, jwt_headers(ANNA)), timeout=10)
    assert (listed.status_code, listed.json()["error"]["code"]) == (403, "front_end_route")


def test_the_usage_report_and_sshare_list_the_front_ends_people_under_its_account(gateway, front_end_key, on_engine8):
    import datetime as dt
    import io
    import json

    from django.core.management import call_command

    for person in (ANNA, BEN, BEN):
        answer = httpx.post(gateway.url + "/v1/chat/completions", json=chat(),
                            headers=headers(front_end_key, jwt_headers(person)), timeout=30)
        assert answer.status_code == 200
    eventually(lambda: flushed() and UsageRecord.objects.filter(key_id=front_end_key.key_id).count() == 3,
               what="three usage rows")
    today = dt.datetime.now(dt.UTC).date()
    out = io.StringIO()
    call_command("usage_report", "--from", str(today), "--to", str(today + dt.timedelta(days=1)),
                 "--by", "account,user", "--format", "json", stdout=out)
    rows = {(row["account"], row["user"]): row["requests"] for row in json.loads(out.getvalue())["rows"] if row["user"]}
    assert rows[("lab", "anna@lab.example")] == 1 and rows[("lab", "ben@lab.example")] == 2
    assert not any(user == "openwebui-service" for _, user in rows)  # the front end is nobody's person
    out = io.StringIO()
    call_command("sshare", "--json", stdout=out)
    shown = {(row["account"], row["user"]) for row in json.loads(out.getvalue())}
    assert {("lab", "anna@lab.example"), ("lab", "ben@lab.example")} <= shown
