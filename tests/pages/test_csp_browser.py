"""The pages and the API docs in headless Chromium under their Content-Security-Policy: nothing
refused, nothing fetched from anywhere but the portal (the box may be offline), charts and
Swagger UI drawn."""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.telemetry import tasks

# Init scripts run outside the page's policy, so this one can report what the policy refuses.
REPORT_VIOLATIONS = """document.addEventListener("securitypolicyviolation", (e) =>
    console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`));"""


@pytest.mark.browser
def test_the_pages_and_the_api_docs_work_under_the_policy_with_nothing_from_elsewhere(
    chromium, gateway, replica, cast, screenshot_dir
):
    staff = get_user_model().objects.create_user("sam", password="a long staff password", is_staff=True)
    asyncio.run(tasks.poll_and_publish(refit_every=0))  # a sample for the capacity charts
    signed_in = Client()
    signed_in.force_login(staff)
    session = signed_in.cookies[settings.SESSION_COOKIE_NAME].value

    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": gateway.url}])
        elsewhere: list[str] = []

        def offline(route) -> None:
            if route.request.url.startswith(gateway.url + "/"):
                route.continue_()
            else:
                elsewhere.append(route.request.url)
                route.abort()

        context.route("**/*", offline)
        context.add_init_script(REPORT_VIOLATIONS)
        page = context.new_page()
        refused: list[str] = []
        errors: list[str] = []
        page.on("console", lambda message: refused.append(message.text)
                if "Content Security Policy" in message.text or "CSP violation" in message.text else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        response = page.goto(gateway.url + "/capacity/")
        assert response is not None and response.status == 200
        assert "script-src 'self';" in response.headers["content-security-policy"]
        page.wait_for_selector("#chart-queue .main-svg", timeout=15_000)  # Plotly drew it

        for path, drawn in (("/me/", None), ("/me/usage/", "#chart-requests .main-svg"), ("/staff/keys/", None)):
            response = page.goto(gateway.url + path)
            assert response is not None and response.status == 200 and page.url == gateway.url + path
            assert "script-src 'self';" in response.headers["content-security-policy"]
            if drawn:
                page.wait_for_selector(drawn, timeout=15_000)

        response = page.goto(gateway.url + "/api/docs")
        assert response is not None and response.status == 200
        page.wait_for_selector(".swagger-ui .opblock", timeout=15_000)  # the operations, rendered
        assert page.locator(".swagger-ui .opblock").count() > 3
        # The gateway's /v1/ endpoints are in the same document as the JSON API.
        assert page.locator(".swagger-ui .opblock-summary-path", has_text="/v1/chat/completions").count() == 1
        assert page.locator(".swagger-ui .opblock-summary-path", has_text="/v1/models/{model}").count() == 1
        page.screenshot(path=screenshot_dir / "api-docs.png", full_page=True)
        context.close()

    assert refused == []
    assert errors == []
    assert elsewhere == []
