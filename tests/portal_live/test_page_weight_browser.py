"""Page weight (and the favicon): a first visit of the capacity page, in Chromium with an empty cache, transfers
under 1.2 MB, because static files are served gzip-compressed under hashed names (collectstatic,
as `make demo` and the Dockerfile run it) and Plotly is its basic bundle."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from fairness.telemetry import tasks
from tests.support.gateway_process import ROOT
from tests.support.processes import start_gateway

BUDGET = 1_200_000  # bytes on the wire, headers included


def collectstatic(static_root: str) -> None:
    env = {**os.environ, "STATIC_ROOT": static_root, "DJANGO_SETTINGS_MODULE": "gpuportal.settings"}
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
                   cwd=ROOT, env=env, check=True, timeout=120)


@pytest.mark.browser
def test_a_first_visit_of_the_capacity_page_transfers_under_the_budget(chromium, live_db_url, replica, cast, tmp_path):
    static_root = str(tmp_path / "staticfiles")
    collectstatic(static_root)
    asyncio.run(tasks.poll_and_publish(refit_every=0))  # a sample, so the charts draw
    gateway = start_gateway(live_db_url, name="page-weight", STATIC_ROOT=static_root)
    try:
        with chromium() as browser:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            finished = []
            page.on("requestfinished", lambda request: finished.append(request))
            response = page.goto(gateway.url + "/capacity/")
            assert response is not None and response.status == 200
            page.wait_for_selector("#chart-queue .main-svg", timeout=15_000)  # Plotly drew it
            page.wait_for_load_state("networkidle")
            transferred = {}
            for request in finished:
                sizes = request.sizes()
                transferred[request.url] = sizes["responseBodySize"] + sizes["responseHeadersSize"]
            scripts = {
                request.url: request.response() for request in finished if request.url.endswith(".js")
            }
            plotly = [url for url in scripts if "/plotly-basic/plotly-basic.min." in url]
            assert len(plotly) == 1, list(scripts)  # the basic bundle, under its hashed name
            headers = scripts[plotly[0]].all_headers()
            icon = page.evaluate("document.querySelector('link[rel=icon]').href")
            favicon = context.request.get(icon)
            assert favicon.ok and favicon.headers["content-type"] == "image/svg+xml", icon
            context.close()
    finally:
        gateway.stop()

    total = sum(transferred.values())
    print(f"first visit of /capacity/: {total} bytes in {len(transferred)} responses")
    assert headers["content-encoding"] == "gzip"
    assert "immutable" in headers["cache-control"]  # a hashed name is cached for good
    assert transferred[plotly[0]] < 500_000
    assert total < BUDGET, sorted(transferred.items(), key=lambda item: -item[1])
