"""The audit log's filters, pages and CSV, and the replica form's answers from the engine, in
headless Chromium at desktop and phone width: nothing scrolls sideways and axe-core finds no
violation (tests/support/browser_checks.py), on the pages as they stand after each step."""

from __future__ import annotations

import csv
import io
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model

from fairness.actions.audit import Actor, audit
from tests.support.browser import sign_in_as_staff
from tests.support.browser_checks import check_current_page, check_page
from tests.support.cast import STAFF_PASSWORD
from tests.support.enginesim import launch
from tests.support.processes import free_port

User = get_user_model()


@pytest.mark.browser
def test_the_audit_log_filters_pages_and_downloads_what_it_shows(chromium, gateway, cast):
    staff = User.objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    sam = Actor(staff, "127.10.0.1")
    for n in range(120):
        audit(sam, "tier.update", f"batch-{n}", per_key_concurrency=n)
    audit(sam, "key.revoke", "gp-AbCdEf12", owner="a-rather-long-owner-name-that-a-phone-has-to-wrap-somewhere")
    audit(Actor(None, name="os:deploy"), "budget.set", "=account nlp", tokens=5000)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in_as_staff(page, gateway.url)
        check_page(page, gateway.url + "/staff/audit/")

        page.select_option("#audit-actor", "sam")
        page.select_option("#audit-action", "tier.update")
        page.fill("#audit-q", "batch-1")
        page.get_by_role("button", name="Show").click()
        page.wait_for_url(re.compile(r".*/staff/audit/\?.*"))
        assert parse_qs(urlsplit(page.url).query) == {"actor": ["sam"], "action": ["tier.update"], "q": ["batch-1"]}
        # batch-1, batch-10…19, batch-100…119: 31 of them, on one page.
        assert page.locator("table.audit tbody tr").count() == 31
        assert page.get_by_role("heading", name="31 entries found").is_visible()
        check_current_page(page, "the filtered audit log")

        page.get_by_role("link", name="Clear").click()
        page.wait_for_url(gateway.url + "/staff/audit/")
        page.select_option("#audit-action", "tier.update")
        page.get_by_role("button", name="Show").click()
        page.get_by_role("navigation", name="Pages of the audit log").get_by_role("link", name="Older").click()
        page.wait_for_url(re.compile(r".*page=2"))
        assert parse_qs(urlsplit(page.url).query) == {"action": ["tier.update"], "page": ["2"]}
        assert page.locator("table.audit tbody tr").count() == 20
        assert page.locator("#audit-action").input_value() == "tier.update"  # the filter stays chosen
        check_current_page(page, "page 2 of the filtered audit log")

        page.goto(gateway.url + "/staff/audit/?q=nlp")
        with page.expect_download() as download_info:
            page.get_by_role("link", name="Download CSV").click()
        download = download_info.value
        assert re.fullmatch(r"audit-log-\d{8}-\d{4}\.csv", download.suggested_filename)
        with open(download.path(), encoding="utf-8", newline="") as file:
            rows = list(csv.DictReader(io.StringIO(file.read(), newline="")))
        assert [(r["actor"], r["action"], r["target"]) for r in rows] == [("os:deploy", "budget.set", "'=account nlp")]
        assert errors == []


@pytest.mark.browser
def test_the_replica_form_fills_the_model_and_refuses_what_the_kv_cache_cannot_run(chromium, gateway, cast):
    User.objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    silent = f"http://127.0.0.1:{free_port()}"
    with launch(8, "--max-model-len", "128", "--num-gpu-blocks", "8", model="small-cache") as engine, \
            chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in_as_staff(page, gateway.url)
        check_page(page, gateway.url + "/staff/replicas/new/")

        page.fill("#id_name", "gpu9")
        page.fill("#id_base_url", silent)
        page.fill("#id_max_num_seqs", "9")
        page.get_by_role("button", name="Add replica").click()
        page.wait_for_load_state()
        assert "type the model’s name" in page.locator("#id_model").locator("xpath=..").inner_text()
        check_current_page(page, "the replica form refusing an empty model")

        page.fill("#id_base_url", engine.url)
        page.get_by_role("button", name="Add replica").click()
        page.wait_for_load_state()
        field = page.locator("#id_max_num_seqs").locator("xpath=..").inner_text()
        assert "has 8 KV-cache blocks" in field and "can never run 9 at once" in field
        assert page.locator("#id_max_num_seqs").get_attribute("aria-invalid") == "true"
        check_current_page(page, "the replica form refusing more sequences than blocks")

        page.fill("#id_max_num_seqs", "8")
        page.get_by_role("button", name="Add replica").click()
        page.wait_for_url(gateway.url + "/staff/replicas/")
        said = page.locator(".messages").inner_text()
        assert "Added replica gpu9." in said and "gpu9 answered and serves small-cache." in said
        assert "1 sequence of its full context (128 tokens) at once" in said
        check_current_page(page, "the replicas page after adding one")
        assert errors == []
