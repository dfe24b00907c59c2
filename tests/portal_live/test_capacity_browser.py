"""The capacity page in headless Chromium: the estimate, the table, live charts, no reloads."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from fairness.models import SaturationAlert
from fairness.telemetry.capacity_model import USER_COUNTS
from tests.support.cast import MODEL
from tests.support.live_load import capacity_json, polling, running_traffic, traffic_plan
from tests.support.polling import wait_for

SENTENCE = re.compile(
    r"This endpoint serves roughly [\d,.]+ tokens per second in total; "
    r"at 8 concurrent users expect about [\d,.]+ tokens per second each\."
)
# What Plotly drew, read back from the chart's own element.
POINTS = """() => {
    const chart = document.getElementById("chart-queue");
    return chart && chart.data ? chart.data[0].y.filter((y) => y !== null).length : -1;
}"""
CHART_Y = "() => JSON.stringify(document.getElementById('chart-queue').data.map((t) => t.y))"
RUNNING_NOT_ZERO = "() => document.getElementById('running').textContent !== '0'"


def has_estimate(gateway_url: str) -> bool:
    return any(model["per_user"] for model in capacity_json(gateway_url)["models"])


@pytest.mark.browser
def test_the_capacity_page_shows_the_estimate_and_follows_the_load(
    chromium, gateway, replica, cast, screenshot_dir
):
    plan = traffic_plan(gateway.url, cast)
    with polling():
        with running_traffic(plan):
            wait_for(lambda: has_estimate(gateway.url), timeout=60, interval=0.5,
                     what="a published capacity estimate")
        wait_for(lambda: capacity_json(gateway.url)["totals"]["running"] == 0, timeout=30,
                 interval=0.25, what="the engine to drain once the traffic stopped")
        SaturationAlert.objects.create(
            model=MODEL, kind=SaturationAlert.Kind.QUEUE, opened_at=timezone.now(),
            figures={"waiting": 40, "running": 8, "ratio": 5.0},
        )

        with chromium() as browser:
            # The server renders the first view: without JavaScript the figures are all there.
            static = browser.new_page(java_script_enabled=False)
            static.goto(gateway.url + "/capacity/")
            assert SENTENCE.fullmatch(static.locator(".model .sentence").first.inner_text())
            assert static.locator("table.per-user tbody td").count() == len(USER_COUNTS)
            static.close()

            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(gateway.url + "/capacity/")

            assert SENTENCE.fullmatch(page.locator(".model .sentence").first.inner_text())
            # One row per number of users, so the table reads down a phone's screen.
            table = page.locator("table.per-user").first
            users = table.locator("tbody th[scope=row]").all_inner_texts()
            assert users == [str(n) for n in USER_COUNTS]
            cells = table.locator("tbody td").all_inner_texts()
            assert len(cells) == len(USER_COUNTS)
            assert all(re.fullmatch(r"[\d,.]+", cell) for cell in cells), cells
            assert page.locator("#running").inner_text() == "0"
            assert "interactive" in page.locator("#tiers").inner_text()

            # Drawn by Plotly from our own static files, with the samples the poller recorded.
            page.wait_for_function(f"({POINTS})() > 0", timeout=15_000)
            assert page.locator("#chart-queue .main-svg").count() > 0
            chart_before = page.evaluate(CHART_Y)
            page.evaluate("window.notReloaded = true")

            with running_traffic(plan):
                page.wait_for_function(RUNNING_NOT_ZERO, timeout=30_000)
                page.wait_for_function(f"(before) => ({CHART_Y})() !== before", arg=chart_before,
                                       timeout=30_000)
                assert page.evaluate("window.notReloaded") is True
                # Re-rendered by the script from /api/capacity, like every figure on the page.
                alert = page.locator("#alerts .alert").inner_text()
                assert "queue persistently full" in alert and "the card is saturated" in alert
                page.screenshot(path=screenshot_dir / "capacity-page.png", full_page=True)

            assert page.locator("#status.stale").count() == 0
            assert errors == []
