"""The capacity page and a researcher's pages at desktop and phone width: nothing scrolls
sideways, axe-core finds nothing, and the figures people asked for are there."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.accounting import usage_rollup
from fairness.models import ApiKey, Replica, SaturationAlert, UsageHourly, UsageRecord
from tests.support.browser_checks import WIDTHS, accessibility_violations, check_page, open_settled, sideways_overflow
from tests.support.cast import ALICE_PASSWORD, MODEL
from tests.support.dcgm_exporter import DcgmExporter
from tests.support.live_load import capacity_json, polling
from tests.support.polling import wait_for

DAY_SPAN = """() => {
    const chart = document.getElementById("chart-queue");
    if (!chart || !chart.layout || !chart.layout.xaxis) return 0;
    const [start, end] = chart.layout.xaxis.range;
    return (new Date(end) - new Date(start)) / 3600e3;
}"""


def answered(key: ApiKey, request_id: str, ttft_ms: int, minutes_ago: float = 5) -> None:
    UsageRecord.objects.create(key=key, request_id=request_id, endpoint="chat", model=MODEL, status=200,
                               ttft_ms=ttft_ms, completion_tokens=10,
                               created_at=timezone.now() - dt.timedelta(minutes=minutes_ago))


@pytest.mark.browser
def test_the_capacity_page_fits_a_phone_and_passes_axe(chromium, gateway, replica, cast, screenshot_dir):
    alice = ApiKey.objects.get(pk=cast["alice"].key_id)
    carol = ApiKey.objects.get(pk=cast["carol"].key_id)
    for i, ttft in enumerate((120, 180, 240, 900)):
        answered(alice, f"a{i}", ttft)
    answered(carol, "c0", 65_000)
    SaturationAlert.objects.create(
        model=MODEL, kind=SaturationAlert.Kind.KV, opened_at=timezone.now(),
        figures={"waiting": 3, "running": 8, "ratio": 0.4, "kv_usage": 0.9644123},
    )
    # Its GPUs from a DCGM exporter, beside a replica that names none.
    Replica.objects.create(name="sim-b", base_url=replica.base_url, model=MODEL, max_num_seqs=8)
    exporter = DcgmExporter()
    Replica.objects.filter(pk=replica.pk).update(gpu_metrics_url=exporter.url)
    with exporter, polling():
        wait_for(lambda: UsageRecord.objects.exists(), timeout=5)
        wait_for(lambda: any(r["gpu"] for r in capacity_json(gateway.url)["replicas"]), timeout=15,
                 what="a poll with the GPU's figures")
        with chromium() as browser:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            check_page(page, gateway.url + "/capacity/")

            gpus = page.locator("#gpu-rows tr")
            assert gpus.count() == 1  # sim-b names no exporter: no row, no empty cells
            assert gpus.first.inner_text().split("\t") == ["sim-a", "2", "71%", "141 of 158 GiB", "600 W", "71 °C"]
            ttft = page.locator("#ttft-rows").inner_text()
            assert "interactive\t180 ms\t900 ms\t4" in ttft and "batch\t65 s\t65 s\t1" in ttft
            assert "KV cache 96% full" in page.locator("#alerts").inner_text()
            assert "0.964" not in page.content()
            waits = page.locator("#tier-waits").inner_text()
            assert "interactive\t0\tnone" in waits
            glossary = page.locator(".glossary").inner_text()
            assert "KV cache" in glossary and "prefix cache" in glossary
            for jargon in ("Prefix hits", "too alike to measure", "shape is assumed"):
                assert jargon not in page.content()
            assert "borrows idle slots" in page.locator("#tiers").inner_text()

            # "Last day" spans the whole day, however young the portal is.
            page.get_by_role("button", name="Last day").click()
            # Polled from here: Playwright's in-page polling evaluates strings, which the CSP forbids.
            wait_for(lambda: page.evaluate(DAY_SPAN) > 23.9, timeout=15, what="the day-long chart")
            page.screenshot(path=screenshot_dir / "capacity-phone.png", full_page=True)
            assert errors == []


@pytest.mark.browser
def test_a_researchers_pages_fit_a_phone_and_pass_axe(chromium, gateway, replica, cast, screenshot_dir):
    user = get_user_model().objects.get(username="alice")
    user.set_password(ALICE_PASSWORD)
    user.save()
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    waits = [0] * usage_rollup.BUCKETS
    waits[usage_rollup.bucket_of(0)] = 12
    UsageHourly.objects.create(key=key, hour=timezone.now().replace(minute=0, second=0, microsecond=0),
                               requests=12, prompt_tokens=4000, completion_tokens=900, queue_wait_counts=waits)
    answered(key, "a0", 350)

    with chromium() as browser:
        page = browser.new_page()
        page.goto(gateway.url + "/me/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", ALICE_PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(gateway.url + "/me/")

        check_page(page, gateway.url + "/me/")
        policy = page.locator(".policy").first.inner_text()
        assert "Each person runs up to 2 requests at a time, across all their" in policy and "429" in policy
        assert "no waiting" in page.content()

        check_page(page, gateway.url + "/me/usage/")
        assert "350 ms" in page.locator("table.ttft").inner_text()
        page.screenshot(path=screenshot_dir / "me-usage-phone.png", full_page=True)


@pytest.mark.browser
def test_the_api_docs_are_drawn_offline_and_fit_a_phone(chromium, gateway):
    """Swagger UI is a third party's page: it fits, but axe-core finds its own faults (contrast,
    nested buttons, no landmarks), which are not ours to patch."""
    with chromium() as browser:
        page = browser.new_page()
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            open_settled(page, gateway.url + "/api/docs")
            assert page.get_by_text("/v1/chat/completions").count() > 0  # drawn, not a blank page
            assert sideways_overflow(page) <= 0, f"/api/docs scrolls sideways at {width} px"


# What the page around Swagger UI decides (Swagger UI's own markup is its project's).
DOCS_PAGE_RULES = ["html-has-lang", "document-title", "landmark-one-main", "page-has-heading-one", "region"]


@pytest.mark.browser
def test_the_api_docs_page_has_a_language_a_title_landmarks_and_a_way_home(chromium, gateway):
    with chromium() as browser:
        page = browser.new_page()
        open_settled(page, gateway.url + "/api/docs")
        page.locator("#swagger-ui h1", has_text="gpuportal API").wait_for()  # Swagger UI drew the document
        assert page.title() == "gpuportal API: reference"
        assert accessibility_violations(page, DOCS_PAGE_RULES) == []
        page.get_by_role("link", name="← gpuportal").click()
        page.locator("header.site a.brand").wait_for()  # a page of the portal
        assert "/api/docs" not in page.url
