"""/staff/usage/ and its CSV and JSON: the same rows, staff only, and bad input answered with a
form error or a 400 in words, never a server error."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from fairness.actions import accounts
from tests.support.audit import SETUP
from tests.support.usage_records import DAY, record

RANGE = {"from": DAY.isoformat(), "to": (DAY + dt.timedelta(days=1)).isoformat()}
PAGES = ("/staff/usage/", "/staff/usage.csv", "/staff/usage.json")


def without_csrf_token(html: bytes) -> bytes:
    """The sign-out form's token is random text, so it may spell any short name by chance."""
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]*"', b"", html)


@pytest.fixture
def usage(tree):
    record(tree.alice, prompt=100, completion=10, queued_ms=40, ttft_ms=300)
    record(tree.bob, prompt=7, completion=1, queued_ms=900, ttft_ms=None, status=429)
    record(tree.carol, prompt=1, completion=1)
    return tree


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_visitors_are_sent_to_sign_in(client, path, usage):
    response = client.get(path, RANGE)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("path", PAGES)
def test_a_researcher_cannot_read_anyones_usage(path, usage):
    """alice has keys and usage of her own; the report still refuses her, whatever she asks for."""
    alice = Client()
    alice.force_login(get_user_model().objects.get(username="alice"))
    for query in (RANGE, {**RANGE, "by": "user"}, {**RANGE, "by": "key"}, {"from": "nonsense"}):
        response = alice.get(path, query)
        assert response.status_code == 403, query
        assert b"bob" not in without_csrf_token(response.content)


def test_a_deactivated_staff_member_is_refused(staff, usage):
    staff_client = Client()
    staff_client.force_login(staff)
    staff.is_active = False
    staff.save(update_fields=["is_active"])
    assert staff_client.get("/staff/usage.json", RANGE).status_code in (302, 403)


def test_the_page_shows_the_table_totals_chart_data_and_download_links(staff_client, usage):
    response = staff_client.get("/staff/usage/", {**RANGE, "by": "account,user"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "<th scope=\"row\">lab</th><td>alice</td>" in html
    assert "<th scope=\"row\">proj</th><td>bob</td>" in html
    assert 'id="usage-chart-data"' in html
    chart = response.context["chart"]
    assert chart["labels"][0] == "lab / alice"
    assert chart["prompt"][0] + chart["completion"][0] == 120
    query = "from=2031-03-10&amp;to=2031-03-11&amp;by=account%2Cuser"
    assert f'href="/staff/usage.csv?{query}"' in html
    assert f'href="/staff/usage.json?{query}"' in html
    assert response.context["report"].total.requests == 3


def test_the_page_defaults_to_this_month_so_far_by_account(staff_client, tree):
    today = timezone.now().date()
    record(tree.alice, at=timezone.now())
    response = staff_client.get("/staff/usage/")
    assert response.status_code == 200
    report = response.context["report"]
    assert (report.start, report.end, report.by) == (today.replace(day=1), today + dt.timedelta(days=1), ("account",))
    assert report.total.requests == 1


def test_the_csv_download_has_the_pages_rows_and_a_named_file(staff_client, usage):
    response = staff_client.get("/staff/usage.csv", {**RANGE, "by": "account,user"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == (
        'attachment; filename="usage_2031-03-10_to_2031-03-11_by_account-user.csv"')
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert list(rows[0]) == ["account", "user", "requests", "prompt_tokens", "completion_tokens", "weighted_tokens",
                             "errors", "queue_p50_ms", "queue_p95_ms", "ttft_p50_ms", "ttft_p95_ms"]
    assert rows[0] == {"account": "lab", "user": "alice", "requests": "1", "prompt_tokens": "100",
                       "completion_tokens": "10", "weighted_tokens": "120.0", "errors": "0", "queue_p50_ms": "40",
                       "queue_p95_ms": "40", "ttft_p50_ms": "300", "ttft_p95_ms": "300"}
    bob = next(row for row in rows if row["user"] == "bob")
    assert (bob["errors"], bob["ttft_p50_ms"]) == ("1", "")  # no first token: an empty cell
    page = staff_client.get("/staff/usage/", {**RANGE, "by": "account,user"}).context["report"]
    assert [(r["account"], r["user"]) for r in rows] == [row.group for row in page.rows]


def test_a_name_a_spreadsheet_would_run_is_defused_in_the_csv(staff_client, usage):
    sneaky = accounts.add_account(SETUP, "-2+3")
    accounts.add_member(SETUP, sneaky, get_user_model().objects.get(username="alice"))
    usage.alice.membership = sneaky.memberships.get()
    usage.alice.save(update_fields=["membership"])
    text = staff_client.get("/staff/usage.csv", {**RANGE, "by": "account"}).content.decode()
    assert "\n'-2+3," in text


def test_the_json_has_the_same_rows_the_total_and_the_unit(staff_client, usage):
    response = staff_client.get("/staff/usage.json", {**RANGE, "by": "user"})
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'inline; filename="usage_2031-03-10_to_2031-03-11_by_user.json"'
    body = response.json()
    assert (body["from"], body["to"], body["by"], body["unit"]) == ("2031-03-10", "2031-03-11", ["user"],
                                                                    "weighted tokens")
    assert body["weights"] == {"prompt": 1.0, "cached_prompt": 0.1, "completion": 2.0}
    assert [row["user"] for row in body["rows"]] == ["alice", "bob", "carol"]
    assert body["rows"][1]["ttft_p50_ms"] is None
    assert body["total"]["requests"] == 3
    assert body["total"]["weighted_tokens"] == 120 + 9 + 3


BAD_QUERIES = [
    ({"from": "2031-13-01", "to": "2031-03-11"}, "from", "YYYY-MM-DD"),
    ({"from": "yesterday", "to": "2031-03-11"}, "from", "YYYY-MM-DD"),
    ({"from": "2031-03-10", "to": "10/03/2031"}, "to", "YYYY-MM-DD"),
    ({"from": "2031-03-12", "to": "2031-03-11"}, "to", "end date must come after"),
    ({"from": "2031-03-11", "to": "2031-03-11"}, "to", "end date must come after"),
    ({**RANGE, "by": "project"}, "by", "Unknown grouping project"),
    ({**RANGE, "by": "account,user,key"}, "by", "one or two"),
    ({**RANGE, "by": "<script>"}, "by", "Unknown grouping"),
    ({"from": "9999-12-31", "to": "2031-03-11"}, "to", "end date must come after"),
    ({**RANGE, "by": ","}, "by", "one or two"),
]


@pytest.mark.parametrize("query, field, message", BAD_QUERIES)
def test_bad_input_gets_a_form_error_on_the_page(staff_client, tree, query, field, message):
    response = staff_client.get("/staff/usage/", query)
    assert response.status_code == 400
    assert message in " ".join(response.context["form"].errors[field])
    assert 'class="errorlist"' in response.content.decode()
    assert "<script>" not in response.content.decode().split("<main")[1]


@pytest.mark.parametrize("query, field, message", BAD_QUERIES)
def test_bad_input_gets_a_400_in_words_from_the_downloads(staff_client, tree, query, field, message):
    as_csv = staff_client.get("/staff/usage.csv", query)
    assert as_csv.status_code == 400
    assert message in as_csv.content.decode()
    as_json = staff_client.get("/staff/usage.json", query)
    assert as_json.status_code == 400
    assert message in as_json.json()["error"]["message"]


def test_a_nul_character_is_a_400_too(staff_client, tree):
    for path in PAGES:
        assert staff_client.get(path, {"from": "2031-03-10\x00"}).status_code == 400


def test_a_range_too_large_to_read_is_a_form_error(staff_client, usage, monkeypatch):
    from fairness.portal.reports import usage as usage_report

    monkeypatch.setattr(usage_report, "MAX_RECORDS", 2)
    response = staff_client.get("/staff/usage/", RANGE)
    assert response.status_code == 400
    assert "choose a shorter range" in response.content.decode()
    assert staff_client.get("/staff/usage.json", RANGE).status_code == 400


def test_a_range_older_than_the_records_says_what_is_missing(staff_client, usage):
    html = staff_client.get("/staff/usage/", RANGE | {"from": "2020-01-01"}).content.decode()
    assert "Request records are kept 30 days" in html


def test_the_staff_nav_links_the_report(staff_client, tree):
    assert 'href="/staff/usage/"' in staff_client.get("/staff/").content.decode()


def test_the_admin_api_gives_the_same_report_to_an_admin_token_only(staff, usage):
    from fairness.actions.audit import Actor
    from fairness.actions.tokens import issue_admin_token

    token = issue_admin_token(Actor(staff), staff, "reports")[1]
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = api.get("/api/admin/usage", {**RANGE, "by": "account,user"}).json()
    staff_client = Client()
    staff_client.force_login(staff)
    page = staff_client.get("/staff/usage.json", {**RANGE, "by": "account,user"}).json()
    assert {**body, "records_kept_since": ""} == {**page, "records_kept_since": ""}  # read a moment apart
    assert body["rows"][0]["account"] == "lab"
    assert api.get("/api/admin/usage", {**RANGE, "by": "fish"}).status_code == 400
    assert "YYYY-MM-DD" in api.get("/api/admin/usage", {"from": "soon"}).content.decode()
    assert Client().get("/api/admin/usage", RANGE).status_code == 401
    alice = Client()
    alice.force_login(get_user_model().objects.get(username="alice"))
    assert alice.get("/api/admin/usage", RANGE).status_code == 401


def test_a_cell_holding_a_bare_carriage_return_stays_one_cell(staff_client, usage):
    from fairness.models import UsageRecord

    UsageRecord.objects.update(model="de\rmo")  # a model name as a client could have sent it
    text = staff_client.get("/staff/usage.csv", {**RANGE, "by": "model"}).content.decode()
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len({len(row) for row in rows}) == 1  # every row as wide as the header
    assert [row[0] for row in rows[1:]] == ["de\rmo"]
