"""The page the portal answers while its database is away, in headless Chromium: a gateway over a
private PostgreSQL (tests/support/postgres_server.py) that is then stopped. The page says why,
names nobody (only the database could say who is signed in), shows no traceback, and fits with no
accessibility violation at desktop and phone width."""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings

from tests.support.browser_checks import check_page
from tests.support.postgres_server import PrivatePostgres
from tests.support.processes import gateway_env, start_gateway


@pytest.mark.browser
def test_the_outage_page_names_nobody_says_why_and_passes_axe_at_both_widths(chromium, redis_url, screenshot_dir):
    postgres = PrivatePostgres()
    gateway = None
    try:
        postgres.start()
        postgres.create_database()
        postgres.migrate(gateway_env(postgres.url()))
        gateway = start_gateway(postgres.url(), name="outage-page-gateway", GP_DATABASE_CONNECT_TIMEOUT="2")
        assert httpx.get(gateway.url + "/capacity/", timeout=10).status_code == 200
        postgres.stop()

        # A staff member's session cookie, say: whose it is, only the database knows.
        cookie = {settings.SESSION_COOKIE_NAME: "s" * 32}
        page = httpx.get(gateway.url + "/me/", cookies=cookie, timeout=10)
        assert page.status_code == 503
        assert page.headers["content-type"].startswith("text/html") and int(page.headers["retry-after"]) > 0
        assert "cannot reach its database" in page.text and "Traceback" not in page.text
        api = httpx.get(gateway.url + "/api/replicas", timeout=10)
        assert api.status_code == 503 and api.json()["error"]["code"] == "database_unavailable"

        with chromium() as browser:
            context = browser.new_context()
            context.add_cookies([{"name": name, "value": value, "url": gateway.url} for name, value in cookie.items()])
            tab = context.new_page()
            check_page(tab, gateway.url + "/me/")
            tab.screenshot(path=screenshot_dir / "database-unavailable.png", full_page=True)
            assert tab.get_by_role("heading", level=1).inner_text() == "Unavailable for a moment"
            # No menu: not the staff pages' links, not a name, not a sign-out form.
            assert tab.locator("nav, form").count() == 0
            assert [link.get_attribute("href") for link in tab.locator("a").all()] == ["#main", "/"]
    finally:
        if gateway is not None:
            gateway.stop()
        postgres.destroy()
