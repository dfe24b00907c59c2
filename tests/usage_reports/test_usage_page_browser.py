"""The usage report in headless Chromium against a live gateway, under the real CSP: the table
and the chart at desktop and phone width (no sideways scroll, no axe violation), the CSV
download with its file name, and a bad date shown as a form error."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest
from django.contrib.auth import get_user_model

from tests.support.browser_checks import check_page
from tests.support.cast import STAFF_PASSWORD
from tests.support.usage_records import DAY, NOON, record

PATH = "/staff/usage/?from=2031-03-10&to=2031-03-11&by=account%2Cuser"


@pytest.mark.browser
def test_the_usage_page_draws_its_table_and_chart_and_downloads_csv(chromium, gateway, tree, redis_url):
    from playwright.sync_api import expect

    get_user_model().objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    for n in range(12):
        record(tree.alice, at=NOON + dt.timedelta(minutes=n), prompt=100 + n, completion=50, queued_ms=10 * n)
    record(tree.bob, prompt=30, completion=5, status=429, ttft_ms=None)
    record(tree.carol_batch, prompt=5, completion=900, model="a-model-with-a-rather-long-name-to-wrap")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(gateway.url + PATH)
        assert "/accounts/login/" in page.url
        page.fill("#id_username", "sam")
        page.fill("#id_password", STAFF_PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(gateway.url + PATH)

        check_page(page, gateway.url + PATH)
        table = page.locator("table.usage-report")
        expect(table.locator("tbody tr")).to_have_count(3)
        expect(table.locator("tbody tr").first.locator("th")).to_have_text("lab")
        expect(table.locator("tfoot")).to_contain_text("Total")
        # Plotly drew both stacked traces, one bar per row, under the page's own CSP.
        expect(page.locator("#chart-usage .main-svg").first).to_be_visible()
        expect(page.locator("#chart-usage g.trace.bars")).to_have_count(2)
        expect(page.locator("#chart-usage g.trace.bars").first.locator("g.point")).to_have_count(3)

        with page.expect_download() as download_info:
            page.get_by_role("link", name="Download CSV").click()
        download = download_info.value
        assert download.suggested_filename == "usage_2031-03-10_to_2031-03-11_by_account-user.csv"
        with open(download.path(), encoding="utf-8") as file:
            rows = list(csv.DictReader(io.StringIO(file.read())))
        assert [(r["account"], r["user"]) for r in rows] == [("lab", "alice"), ("other", "carol"), ("proj", "bob")]
        assert sum(int(r["requests"]) for r in rows) == 14

        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(gateway.url + "/staff/usage/?from=2031-03-12&to=2031-03-11")
        expect(page.locator("#id_to-errors")).to_contain_text("end date must come after")
        check_page(page, gateway.url + "/staff/usage/?from=2031-03-12&to=2031-03-11")
        check_page(page, gateway.url + f"/staff/usage/?from={DAY.isoformat()}&to=2031-03-11&by=model")
        assert errors == []
