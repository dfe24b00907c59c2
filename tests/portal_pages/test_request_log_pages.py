"""The request log: staff's at /staff/requests/ (everyone's, narrowed by person, key, model,
status, ending and time), one's own at /me/requests/, one request's timeline, paging by keyset
that keeps the filters, and the rows as CSV. A researcher sees their own requests alone."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import re
from html import unescape

import pytest
from django.contrib.auth import get_user_model

from fairness.models import ApiKey, UsageRecord
from fairness.portal.reports import request_log

pytestmark = pytest.mark.django_db(transaction=True)

T0 = dt.datetime(2031, 3, 10, 12, 0, tzinfo=dt.UTC)
_ids = itertools.count(1)


def logged(member, *, at: dt.datetime = T0, **fields) -> UsageRecord:
    key = ApiKey.objects.get(pk=member.key_id)
    row = {"request_id": f"req-{next(_ids):04d}", "endpoint": "chat/completions", "model": "sim", "status": 200,
           "ended": "done", "prompt_tokens": 100, "completion_tokens": 20, "latency_ms": 900, "ttft_ms": 300,
           "tier": member.tier, **fields}
    return UsageRecord.objects.create(key=key, person_id=key.owner_id, created_at=at, **row)


def ids_on(response) -> list[str]:
    return [row.record.request_id for row in response.context["rows"]]


def link(response, rel: str) -> str | None:
    """The page's link to the next or previous page (a query on the same path)."""
    found = re.search(rf'href="([^"]+)" rel="{rel}"', response.content.decode())
    return response.request["PATH_INFO"] + unescape(found.group(1)) if found else None


@pytest.fixture
def requests(cast):
    """alice: a done chat, a 429 refused, one cut off by her client; bob: an engine error on another model."""
    return {
        "done": logged(cast["alice"], held_by="no_slot", queued_ms=250, queue_estimate_ms=300, replica="card-0"),
        "refused": logged(cast["alice"], at=T0 + dt.timedelta(hours=1), status=429, ended="refused",
                          refusal="rate_limited", ttft_ms=None, prompt_tokens=0, completion_tokens=0),
        "gone": logged(cast["alice"], at=T0 + dt.timedelta(days=1), status=499, ended="client_gone",
                       replica="card-0"),
        "failed": logged(cast["bob"], at=T0 + dt.timedelta(hours=2), model="=cmd|calc", status=502,
                         ended="engine_error", replica="card-1"),
    }


def test_each_filter_narrows_the_staff_log(staff_client, requests, cast):
    r = requests
    assert ids_on(staff_client.get("/staff/requests/")) == [
        r["gone"].request_id, r["failed"].request_id, r["refused"].request_id, r["done"].request_id]
    assert ids_on(staff_client.get("/staff/requests/?person=bob")) == [r["failed"].request_id]
    alice_prefix = ApiKey.objects.get(pk=cast["alice"].key_id).prefix
    assert set(ids_on(staff_client.get(f"/staff/requests/?key={alice_prefix}"))) == {
        r["done"].request_id, r["refused"].request_id, r["gone"].request_id}
    assert ids_on(staff_client.get("/staff/requests/?model=%3Dcmd%7Ccalc")) == [r["failed"].request_id]
    assert ids_on(staff_client.get("/staff/requests/?status=429")) == [r["refused"].request_id]
    assert ids_on(staff_client.get("/staff/requests/?ended=client_gone")) == [r["gone"].request_id]
    one_day = "/staff/requests/?person=alice&from=2031-03-10T00:00&to=2031-03-11T00:00"
    assert ids_on(staff_client.get(one_day)) == [r["refused"].request_id, r["done"].request_id]
    assert ids_on(staff_client.get("/staff/requests/?person=nobody")) == []


def test_a_filter_it_cannot_read_is_said_not_guessed(staff_client, requests):
    response = staff_client.get("/staff/requests/?status=abc&from=yesterday&ended=exploded")
    assert response.status_code == 400
    html = unescape(response.content.decode())
    assert "status: enter an HTTP status" in html and "from: enter a time" in html and "ended: choose" in html


def test_pages_go_by_keyset_newest_first_and_keep_the_filters(staff_client, cast):
    # 120 of alice's, ten sharing each second (ties across a page's edge), and bob's among them.
    mine = [logged(cast["alice"], at=T0 + dt.timedelta(seconds=n // 10)) for n in range(120)]
    logged(cast["bob"], at=T0 + dt.timedelta(seconds=5))
    newest_first = [r.request_id for r in sorted(mine, key=lambda r: (r.created_at, r.pk), reverse=True)]
    seen, url = [], "/staff/requests/?person=alice"
    for _ in range(3):
        response = staff_client.get(url)
        seen += ids_on(response)
        url = link(response, "next")
        if url is None:
            break
        assert "person=alice" in url
    assert seen == newest_first and url is None
    back = staff_client.get(link(response, "prev"))
    assert ids_on(back) == newest_first[50:100]
    assert len(ids_on(staff_client.get("/staff/requests/?person=alice&before=garbage"))) == request_log.PAGE_SIZE


def test_a_requests_timeline_counts_each_moment_from_its_arrival(staff_client, requests):
    done = requests["done"]
    response = staff_client.get(f"/staff/requests/{done.request_id}/")
    assert response.status_code == 200
    moments = {m.what: m for m in response.context["timeline"]}
    assert list(moments) == ["Arrived", "Queued", "Admitted", "First token", "Ended"]
    assert (moments["Admitted"].after_ms, moments["First token"].after_ms, moments["Ended"].after_ms) == (250, 300, 900)
    assert moments["Ended"].at == T0 + dt.timedelta(milliseconds=900)
    assert "no free slot" in moments["Queued"].words and "300 ms" in moments["Queued"].words
    refused = staff_client.get(f"/staff/requests/{requests['refused'].request_id}/")
    assert [m.what for m in refused.context["timeline"]] == ["Arrived", "Ended"]
    assert "rate_limited" in unescape(refused.content.decode())
    assert staff_client.get("/staff/requests/req-nope/").status_code == 404


def test_the_csv_holds_every_row_the_filters_pick_defused_for_spreadsheets(staff_client, requests, settings):
    settings.GP_FAIRSHARE_WEIGHT_PROMPT, settings.GP_FAIRSHARE_WEIGHT_COMPLETION = 1.0, 3.0
    response = staff_client.get("/staff/requests.csv?ended=engine_error")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    body = b"".join(response.streaming_content).decode()
    assert body.endswith("\r\n") and "\r\n" in body.splitlines(keepends=True)[0]
    (row,) = list(csv.DictReader(io.StringIO(body)))
    assert row["request_id"] == requests["failed"].request_id
    assert row["model"] == "'=cmd|calc"  # a spreadsheet shows it, does not run it
    assert (row["person"], row["ended"], row["status"]) == ("bob", "engine_error", "502")
    assert row["weighted_tokens"] == "160.0"  # 100 prompt at 1 and 20 completion at 3
    everything = b"".join(staff_client.get("/staff/requests.csv").streaming_content).decode()
    assert len(list(csv.DictReader(io.StringIO(everything)))) == 4


def test_a_researcher_sees_their_own_requests_only(researcher_client, requests):
    own = ids_on(researcher_client.get("/me/requests/"))
    assert set(own) == {requests[name].request_id for name in ("done", "refused", "gone")}
    # No person filter on one's own log: naming someone else shows nothing of theirs.
    assert requests["failed"].request_id not in ids_on(researcher_client.get("/me/requests/?person=bob"))
    assert ids_on(researcher_client.get("/me/requests/?ended=refused")) == [requests["refused"].request_id]
    assert researcher_client.get(f"/me/requests/{requests['done'].request_id}/").status_code == 200
    assert researcher_client.get(f"/me/requests/{requests['failed'].request_id}/").status_code == 404
    body = b"".join(researcher_client.get("/me/requests.csv").streaming_content).decode()
    assert {row["person"] for row in csv.DictReader(io.StringIO(body))} == {"alice"}


def test_the_staff_log_is_staff_only(researcher_client, client, requests):
    for url in ("/staff/requests/", f"/staff/requests/{requests['done'].request_id}/", "/staff/requests.csv"):
        assert researcher_client.get(url).status_code == 403
        anonymous = client.get(url)
        assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert client.get("/me/requests/").status_code == 302


def test_a_front_end_request_names_the_front_end_not_its_key_to_the_person(researcher_client, staff, requests, cast):
    front = ApiKey.objects.create(owner=staff, tier_id=ApiKey.objects.get(pk=cast["alice"].key_id).tier_id,
                                  prefix="gp-FrontEnd1", secret_hash="f" * 64, front_end="openwebui", label="chat")
    alice = get_user_model().objects.get(username="alice")
    row = UsageRecord.objects.create(key=front, person=alice, request_id="req-owui", endpoint="chat/completions",
                                     model="sim", status=200, ended="done", created_at=T0)
    html = researcher_client.get("/me/requests/").content.decode()
    assert "Open WebUI (chat)" in html and "gp-FrontEnd1" not in html
    assert request_log.front_end_of(row) == "Open WebUI (chat)"


def test_the_overview_the_staff_home_and_the_usage_page_link_to_the_log(researcher_client, staff_client, cast):
    assert 'href="/me/requests/"' in researcher_client.get("/me/").content.decode()
    assert 'href="/staff/requests/"' in staff_client.get("/staff/").content.decode()
    assert 'href="/staff/requests/"' in staff_client.get("/staff/usage/").content.decode()


def test_the_api_answers_a_key_with_its_owners_requests_alone_a_page_at_a_time(client, requests, cast):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {cast['alice'].secret}"}
    first = client.get("/api/me/requests", {"limit": 2}, **auth)
    assert first.status_code == 200, first.content
    body = first.json()
    assert [r["id"] for r in body["requests"]] == [requests["gone"].request_id, requests["refused"].request_id]
    assert body["requests"][1]["refusal"] == "rate_limited" and body["requests"][1]["ended"] == "refused"
    rest = client.get("/api/me/requests", {"limit": 2, "before": body["older"]}, **auth).json()
    assert [r["id"] for r in rest["requests"]] == [requests["done"].request_id] and rest["older"] is None
    assert rest["requests"][0]["held_by"] == "no_slot"
    one_day = client.get("/api/me/requests", {"from": "2031-03-10", "to": "2031-03-11", "ended": "done"}, **auth)
    assert [r["id"] for r in one_day.json()["requests"]] == [requests["done"].request_id]
    bobs = client.get("/api/me/requests", HTTP_AUTHORIZATION=f"Bearer {cast['bob'].secret}").json()
    assert [r["id"] for r in bobs["requests"]] == [requests["failed"].request_id]


def test_the_api_refuses_an_unreadable_filter_and_a_missing_key_openai_shaped(client, cast):
    bad = client.get("/api/me/requests", {"status": "lots"}, HTTP_AUTHORIZATION=f"Bearer {cast['alice'].secret}")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_filter"
    assert client.get("/api/me/requests").json()["error"]["code"] == "missing_api_key"
