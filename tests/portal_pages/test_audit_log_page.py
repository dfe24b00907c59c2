"""The staff audit log page: narrowing it to an actor, an action or a target, searching any text
(the detail too), paging that keeps the filters, and the filtered rows as CSV, which a
spreadsheet cannot run as formulas and only staff may download."""

from __future__ import annotations

import csv
import io
import json
import re
from html import unescape

import pytest

from fairness.actions.audit import Actor, audit
from fairness.models import AuditEntry
from tests.support.audit import SETUP

pytestmark = pytest.mark.django_db(transaction=True)


def targets_on(response) -> list[str]:
    return [e.target for e in response.context["page"].object_list]


def rows_of(response) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.fixture
def log(staff, cast):
    """sam changed a tier and revoked a key; a command set a budget."""
    sam = Actor(staff, "127.10.0.1")
    audit(sam, "tier.update", "batch", per_key_concurrency=5)
    audit(sam, "key.revoke", "gp-AbCdEf12")
    audit(Actor(None, name="os:deploy"), "budget.set", "account nlp-lab", tokens=5000, period="month")
    audit(SETUP, "user.create", "dora", note="Gift 100% off_it")


def test_actor_action_and_target_each_narrow_the_log(staff_client, log):
    assert targets_on(staff_client.get("/staff/audit/?actor=sam")) == ["gp-AbCdEf12", "batch"]
    assert targets_on(staff_client.get("/staff/audit/?action=budget.set")) == ["account nlp-lab"]
    assert targets_on(staff_client.get("/staff/audit/?target=NLP")) == ["account nlp-lab"]
    assert targets_on(staff_client.get("/staff/audit/?actor=sam&action=key.revoke")) == ["gp-AbCdEf12"]
    assert targets_on(staff_client.get("/staff/audit/?actor=sam&action=budget.set")) == []
    assert len(targets_on(staff_client.get("/staff/audit/"))) == 4


def test_the_dropdowns_offer_the_actors_and_actions_the_log_holds(staff_client, log):
    html = staff_client.get("/staff/audit/?actor=os:deploy").content.decode()
    actor_select = re.search(r'<select id="audit-actor".*?</select>', html, re.S).group(0)
    action_select = re.search(r'<select id="audit-action".*?</select>', html, re.S).group(0)
    assert re.findall(r'<option value="([^"]*)"', actor_select) == ["", "os:deploy", "sam", "test-setup"]
    assert '<option value="os:deploy" selected>' in actor_select
    assert re.findall(r'<option value="([^"]*)"', action_select) == [
        "", "budget.set", "key.revoke", "tier.update", "user.create"]


def test_the_search_finds_words_in_any_column_and_in_the_detail(staff_client, log):
    assert targets_on(staff_client.get("/staff/audit/?q=5000")) == ["account nlp-lab"]  # in the detail only
    assert targets_on(staff_client.get("/staff/audit/?q=PER_KEY")) == ["batch"]  # a detail key, any case
    assert targets_on(staff_client.get("/staff/audit/?q=os:dep")) == ["account nlp-lab"]
    assert targets_on(staff_client.get("/staff/audit/?q=revoke")) == ["gp-AbCdEf12"]
    # % and _ are searched for as themselves, not as SQL wildcards.
    assert targets_on(staff_client.get("/staff/audit/", {"q": "100% off_"})) == ["dora"]
    assert targets_on(staff_client.get("/staff/audit/", {"q": "0%"})) == ["dora"]
    assert targets_on(staff_client.get("/staff/audit/", {"q": "a_c"})) == []
    assert targets_on(staff_client.get("/staff/audit/?q=nothing-like-it")) == []
    assert "No entry matches." in staff_client.get("/staff/audit/?q=nothing-like-it").content.decode()


def test_paging_keeps_the_filters(staff_client, staff, log):
    sam = Actor(staff, "127.10.0.1")
    for n in range(130):
        audit(sam, "tier.update", f"t{n}")
        audit(sam, "key.issue", f"k{n}")
    first = staff_client.get("/staff/audit/?action=tier.update&q=t1")
    # t1, t10–t19, t100–t129: 41 entries, and "batch" (its detail has no "t1").
    assert first.context["page"].paginator.count == 41
    assert len(targets_on(first)) == 41 and "Older" not in first.content.decode()

    wide = staff_client.get("/staff/audit/?action=tier.update")
    assert wide.context["page"].paginator.count == 131
    older = re.search(r'<a href="([^"]+)" rel="next">Older', wide.content.decode()).group(1)
    assert unescape(older) == "?action=tier.update&page=2"
    second = staff_client.get("/staff/audit/" + unescape(older))
    assert targets_on(second) == [f"t{n}" for n in range(29, -1, -1)] + ["batch"]
    newer = re.search(r'<a href="([^"]+)" rel="prev">Newer', second.content.decode()).group(1)
    assert unescape(newer) == "?action=tier.update&page=1"
    assert "k0" not in second.content.decode()


def test_the_csv_holds_every_filtered_entry_not_one_page(staff_client, staff, log):
    sam = Actor(staff, "127.10.0.1")
    for n in range(150):
        audit(sam, "key.issue", f"k{n}")
    response = staff_client.get("/staff/audit.csv?actor=sam&action=key.issue")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv; charset=utf-8"
    assert re.fullmatch(r'attachment; filename="audit-log-\d{8}-\d{4}\.csv"', response["Content-Disposition"])
    rows = rows_of(response)
    assert [r["target"] for r in rows] == [f"k{n}" for n in range(149, -1, -1)]
    assert {(r["actor"], r["action"], r["from"]) for r in rows} == {("sam", "key.issue", "127.10.0.1")}

    budget = rows_of(staff_client.get("/staff/audit.csv?q=5000"))
    assert len(budget) == 1 and json.loads(budget[0]["detail"]) == {"tokens": 5000, "period": "month"}
    assert budget[0]["actor"] == "os:deploy" and budget[0]["from"] == ""
    assert budget[0]["at_utc"] == AuditEntry.objects.get(action="budget.set").at.isoformat()


def test_the_page_links_the_csv_of_what_it_shows(staff_client, log):
    html = staff_client.get("/staff/audit/?actor=sam&target=gp-").content.decode()
    link = re.search(r'<a id="download-csv" href="([^"]+)" download>Download CSV</a>', html).group(1)
    assert unescape(link) == "/staff/audit.csv?actor=sam&target=gp-"
    assert [r["target"] for r in rows_of(staff_client.get(unescape(link)))] == ["gp-AbCdEf12"]


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_a_cell_a_spreadsheet_would_run_as_a_formula_starts_with_an_apostrophe(staff_client, staff, start):
    audit(Actor(None, name=f"{start}cmd|' /C calc'!A0"), "key.revoke", f"{start}HYPERLINK(\"x\")", note="plain")
    row = rows_of(staff_client.get("/staff/audit.csv"))[0]
    assert row["actor"] == f"'{start}cmd|' /C calc'!A0"
    assert row["target"] == f"'{start}HYPERLINK(\"x\")"
    assert row["action"] == "key.revoke" and row["detail"] == '{"note": "plain"}'  # others untouched


def test_a_researcher_gets_neither_the_page_nor_the_csv(researcher_client, client, log):
    for path in ("/staff/audit/", "/staff/audit.csv", "/staff/audit.csv?actor=sam"):
        refused = researcher_client.get(path)
        assert refused.status_code == 403 and b"gp-AbCdEf12" not in refused.content
        anonymous = client.get(path)
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert researcher_client.post("/staff/audit.csv").status_code == 403


def test_the_csv_answers_only_reads(staff_client, log):
    assert staff_client.post("/staff/audit.csv").status_code == 405
    assert AuditEntry.objects.count() == 4
