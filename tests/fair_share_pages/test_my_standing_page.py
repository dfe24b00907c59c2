"""/me/standing/: the same standing as /api/me/standing, in words and tables, linked from /me/."""

from __future__ import annotations

import html as html_text
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.utils import timezone

from fairness.accounting import usage_rollup
from fairness.actions import budgets
from fairness.models import ApiKey, UsageRecord
from tests.support.accounts import LabTree, charge, lab_tree
from tests.support.audit import SETUP
from tests.support.budgets import use
from tests.support.usage_records import record

pytestmark = pytest.mark.django_db(transaction=True)

User = get_user_model()


@pytest.fixture
def charged(cast) -> LabTree:
    tree = lab_tree(keys_in_tree=True)
    charge((tree.alice, 1000.0))
    return tree


def signed_in(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def table(html: str, css_class: str) -> list[list[str]]:
    body = re.search(rf'<table class="{css_class}">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert body, f"no {css_class} table"
    return [[re.sub(r"\s+", " ", html_text.unescape(re.sub(r"<[^>]+>", " ", cell))).strip()
             for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S)]


def test_anonymous_visitors_are_sent_to_sign_in(cast):
    response = Client().get("/me/standing/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_overview_links_to_the_standing_page(charged):
    assert 'href="/me/standing/"' in signed_in("alice").get("/me/").content.decode()


def test_it_shows_accounts_fair_share_budgets_rank_and_days(cast, charged):
    lab = budgets.set_budget(SETUP, account=charged.lab, tokens=10_000, period="month")
    use(lab, 2_500)
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    row = record(key, at=timezone.now(), prompt=300, completion=50)
    UsageRecord.objects.filter(pk=row.pk).update(cached_tokens=100)
    row.refresh_from_db()
    with transaction.atomic():  # as the flush runs it (its rows are locked: PostgreSQL wants a transaction)
        usage_rollup.add([row])

    html = signed_in("alice").get("/me/standing/").content.decode()
    assert "In nlp you used 2.5× your share lately" in html
    accounts = table(html, "my-accounts")
    assert accounts[0] == ["nlp default", "1", "40%", "40%", "1,000", "1,000", "100%", "0.18"]
    assert accounts[1][0] == "alice" and accounts[1][-1] == "1.00"
    # The account above nlp holds her too.
    assert re.search(r"<h3>lab</h3><span class=\"detail\">10 k tokens per month</span>", html)
    assert "2,500 used; 7,500 left of 10 k tokens for " in html
    [rank] = table(html, "priority")
    assert rank[:3] == [f"{key.prefix}… alice's key", "interactive", "nlp"]
    assert rank[3:7] == ["0 s", "+600 s", "-247 s", "353 s"]
    assert rank[7:] == ["0 of 2", "0"]
    assert "10 minutes of head start, less 4 minutes 7 seconds for fair share" in html
    today = table(html, "usage-days")[0]
    assert today[1:] == ["1", "300", "100", "50", "310"]  # 200 + 0.1 × 100 + 2 × 50
    assert "1 × each prompt token, 0.1 × each prompt token the engine already had cached" in html


def test_another_researcher_sees_only_their_own(cast, charged):
    html = signed_in("bob").get("/me/standing/").content.decode()
    html = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", html)  # random text may spell a name
    assert "In bob you have used nothing lately" in html
    for hers in ("alice", "nlp", "lab", "1,000", "2.5×"):
        assert not re.search(rf"(?<![\w-]){re.escape(hers)}(?![\w-])", html), hers
