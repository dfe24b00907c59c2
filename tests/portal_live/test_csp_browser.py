"""The pages and the API docs in headless Chromium under their Content-Security-Policy: nothing
refused, nothing fetched from anywhere but the portal (the box may be offline), charts and
Swagger UI drawn."""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
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
        # Every response that set a cookie, and where the session went if a page asked to sign in:
        # what a failure here needs to be understood (the browser must be closed to read the database).
        cookies_set: list[str] = []
        page.on("response", lambda r: cookies_set.append(f"{r.request.method} {r.url} {r.status}: {set_cookie}")
                if (set_cookie := r.headers.get("set-cookie")) else None)
        signed_out_at: tuple[str, object] | None = None

        response = page.goto(gateway.url + "/capacity/")
        assert response is not None and response.status == 200
        assert "script-src 'self';" in response.headers["content-security-policy"]
        page.wait_for_selector("#chart-queue .main-svg", timeout=15_000)  # Plotly drew it

        for path, drawn in (("/me/", None), ("/me/usage/", "#chart-requests .main-svg"), ("/staff/keys/", None)):
            response = page.goto(gateway.url + path)
            if page.url != gateway.url + path:
                signed_out_at = (path, context.cookies())
                break
            assert response is not None and response.status == 200 and page.url == gateway.url + path
            assert "script-src 'self';" in response.headers["content-security-policy"]
            if drawn:
                page.wait_for_selector(drawn, timeout=15_000)

        if signed_out_at is None:
            response = page.goto(gateway.url + "/api/docs")
            assert response is not None and response.status == 200
            page.wait_for_selector(".swagger-ui .opblock", timeout=15_000)  # the operations, rendered
            assert page.locator(".swagger-ui .opblock").count() > 3
            # The gateway's /v1/ endpoints are in the same document as the JSON API.
            assert page.locator(".swagger-ui .opblock-summary-path", has_text="/v1/chat/completions").count() == 1
            assert page.locator(".swagger-ui .opblock-summary-path", has_text="/v1/models/{model}").count() == 1
            page.screenshot(path=screenshot_dir / "api-docs.png", full_page=True)
        context.close()
    if signed_out_at is not None:
        row = Session.objects.filter(session_key=session).first()
        user = get_user_model().objects.filter(pk=staff.pk).values("is_active", "last_login").first()
        raise AssertionError(
            f"{signed_out_at[0]} asked to sign in. Session row: {row and row.get_decoded()} (expires "
            f"{row and row.expire_date}); user: {user}; "
            f"browser cookies: {signed_out_at[1]}; cookies set: {cookies_set}; gateway log:\n{gateway.log_tail()}"
        )
    assert refused == []
    assert errors == []
    assert elsewhere == []
