"""The public capacity page and the API behind it, over plain HTTP (no browser)."""

from __future__ import annotations

import re

import httpx
from django.utils import timezone

from fairness.models import ApiKey, SaturationAlert
from tests.support.cast import MODEL
from tests.support.live_load import capacity_json, polling, running_traffic, traffic_plan
from tests.support.polling import wait_for


def test_the_page_names_no_users_and_shows_no_keys(gateway, replica, cast):
    with polling(), running_traffic(traffic_plan(gateway.url, cast)):
        wait_for(lambda: capacity_json(gateway.url)["totals"]["running"] > 0, timeout=30,
                 what="the poller to see the traffic")
        page = httpx.get(gateway.url + "/capacity/", timeout=10)
    assert page.status_code == 200
    assert "sim-a" in page.text  # the replica table is there: the page is not trivially empty
    html = page.text.lower()
    for member in cast.values():
        assert member.username not in html
        assert member.secret.lower() not in html
    for prefix in ApiKey.objects.values_list("prefix", flat=True):
        assert prefix.lower() not in html
    assert "gp-" not in html


def test_the_api_and_its_docs_answer(gateway, replica):
    capacity = httpx.get(gateway.url + "/api/capacity", timeout=10)
    assert capacity.status_code == 200
    assert set(capacity.json()) >= {"models", "totals", "replicas", "tiers", "alerts", "updated_at"}
    assert httpx.get(gateway.url + "/api/capacity/series?window=day", timeout=10).status_code == 200
    assert httpx.get(gateway.url + "/api/docs", timeout=10).status_code == 200


def test_the_site_root_leads_to_the_capacity_page(gateway):
    response = httpx.get(gateway.url + "/", timeout=10)
    assert response.status_code == 302
    assert response.headers["location"] == "/capacity/"


def test_plotly_comes_from_our_own_static_files(gateway):
    page = httpx.get(gateway.url + "/capacity/", timeout=10).text
    scripts = re.findall(r'<script[^>]+src="([^"]+)"', page)
    assert "/static/vendor/plotly-basic/plotly-basic.min.js" in scripts
    # No CDN: the box may be offline.
    assert all(src.startswith("/static/") for src in scripts), scripts
    plotly = httpx.get(gateway.url + "/static/vendor/plotly-basic/plotly-basic.min.js", timeout=10)
    assert plotly.status_code == 200
    assert "javascript" in plotly.headers["content-type"]
    assert len(plotly.content) > 500_000  # the library itself, not an error page


def test_an_open_alert_is_on_the_page_with_what_to_decide(gateway, replica):
    SaturationAlert.objects.create(
        model=MODEL, kind=SaturationAlert.Kind.QUEUE, opened_at=timezone.now(),
        figures={"waiting": 40, "running": 8, "ratio": 5.0},
    )
    page = httpx.get(gateway.url + "/capacity/", timeout=10).text
    assert "queue persistently full" in page
    assert "40 requests waiting for 8 running" in page
    assert "adding capacity or capping demand is the decision to make" in page
