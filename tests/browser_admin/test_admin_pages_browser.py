"""The staff pages in headless Chromium against a live gateway: a key issued in the browser works
with the openai SDK until it is revoked in the browser; a researcher sees only their own."""

from __future__ import annotations

import asyncio
import datetime as dt

import openai
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.accounting import usage_rollup
from fairness.models import ApiKey, AuditEntry, SaturationAlert, UsageHourly
from fairness.telemetry import polling
from tests.support.browser import ask, sign_in
from tests.support.cast import ALICE_PASSWORD, MODEL, STAFF_PASSWORD

User = get_user_model()


def usage_history(key: ApiKey) -> None:
    """A fortnight of alice's usage, so her chart has something to draw."""
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    for days_ago in range(14):
        waits = [0] * usage_rollup.BUCKETS
        waits[usage_rollup.bucket_of(100)] = 10 + days_ago
        waits[usage_rollup.bucket_of(2500)] = 1
        UsageHourly.objects.create(key=key, hour=now - dt.timedelta(days=days_ago), requests=11 + days_ago,
                                   prompt_tokens=4000 + 300 * days_ago, completion_tokens=1500 + 90 * (days_ago % 5),
                                   queue_wait_counts=waits)


@pytest.mark.browser
def test_a_key_issued_in_the_browser_works_until_it_is_revoked_there(chromium, gateway, replica, cast, screenshot_dir):
    from playwright.sync_api import expect

    # Everything the database needs first: while the browser runs, Django refuses queries here.
    staff = User.objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    alice_prefix = ApiKey.objects.get(pk=cast["alice"].key_id).prefix
    bob_prefix = ApiKey.objects.get(pk=cast["bob"].key_id).prefix
    usage_history(ApiKey.objects.get(pk=cast["alice"].key_id))

    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=gateway.url)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))

        sign_in(page, gateway.url, "/staff/keys/", "sam", STAFF_PASSWORD)
        page.get_by_role("link", name="Issue a key").click()
        page.select_option("#id_owner", "carol")
        page.select_option("#id_tier", "batch")
        page.fill("#id_label", "nightly eval")
        page.fill("#id_expires_days", "30")
        page.get_by_role("button", name="Issue key").click()

        expect(page.get_by_role("heading", name="Key issued")).to_be_visible()
        expect(page.get_by_role("alert")).to_contain_text("cannot be shown again")
        secret = page.locator("#secret").inner_text().strip()
        assert secret.startswith("gp-") and len(secret) > 40
        assert secret not in page.url
        page.get_by_role("button", name="Copy").click()
        expect(page.locator("#copy-status")).to_have_text("Copied to the clipboard.")
        assert page.evaluate("navigator.clipboard.readText()") == secret
        page.screenshot(path=screenshot_dir / "admin-key-issued.png", full_page=True)

        assert ask(secret, gateway.url)  # the key works through the proxy at once

        page.get_by_role("link", name="Back to keys").click()
        row = page.locator("tbody tr", has=page.locator("code", has_text=secret[:11]))
        expect(row).to_contain_text("carol")
        expect(row).to_contain_text("nightly eval")
        expect(page.locator("body")).not_to_contain_text(secret)
        page.screenshot(path=screenshot_dir / "admin-keys-list.png", full_page=True)

        row.get_by_role("link", name="Revoke").click()
        expect(page.get_by_role("heading")).to_contain_text(secret[:11])
        page.get_by_role("button", name="Revoke key").click()
        expect(page.locator(".messages")).to_contain_text(f"Revoked {secret[:11]}")
        with pytest.raises(openai.AuthenticationError):
            ask(secret, gateway.url)
        assert errors == []

        # A researcher: no staff page, only her own keys.
        theirs = browser.new_context(viewport={"width": 1280, "height": 900})
        mine = theirs.new_page()
        mine.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in(mine, gateway.url, "/me/", "alice", ALICE_PASSWORD)
        body = mine.locator("main")
        expect(body).to_contain_text(alice_prefix)
        expect(body).not_to_contain_text(bob_prefix)
        expect(body).to_contain_text("Each person runs up to 2 requests at a time, across all their")
        expect(mine.get_by_role("link", name="Keys", exact=True)).to_have_count(0)
        mine.screenshot(path=screenshot_dir / "me-dashboard.png", full_page=True)
        for path in ("/staff/keys/", "/staff/users/", "/staff/audit/"):
            assert mine.goto(gateway.url + path).status == 403
        mine.goto(gateway.url + "/me/usage/")
        mine.wait_for_function("() => (document.getElementById('chart-tokens').data || []).length === 2")
        mine.screenshot(path=screenshot_dir / "me-usage.png", full_page=True)
        assert errors == []

    assert ApiKey.objects.get(prefix=secret[:11]).revoked_at is not None
    actions = set(AuditEntry.objects.filter(actor=staff, ip="127.0.0.1").values_list("action", flat=True))
    assert actions == {"key.issue", "key.revoke"}


@pytest.mark.browser
def test_every_staff_page_renders_without_script_errors(chromium, gateway, replica, cast, screenshot_dir):
    User.objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    SaturationAlert.objects.create(model=MODEL, kind=SaturationAlert.Kind.QUEUE, opened_at=timezone.now(),
                                   figures={"waiting": 40, "running": 8, "ratio": 5.0})
    asyncio.run(polling.poll_once())  # what the poll task does: the replica page shows its health

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in(page, gateway.url, "/staff/users/", "sam", STAFF_PASSWORD, screenshot_dir / "signin.png")
        # A few changes first, so the lists and the audit log have something in them.
        page.get_by_role("button", name="Move keys").first.click()
        page.goto(gateway.url + "/staff/tiers/batch/edit/")
        page.fill("#id_pool_concurrency", "1")
        page.get_by_role("button", name="Save tier").click()
        assert "at least one key" in page.locator("#id_pool_concurrency_error").inner_text()
        page.screenshot(path=screenshot_dir / "admin-tier-errors.png", full_page=True)

        pages = ["users", "users/new", "tiers", "replicas", "replicas/new", "alerts", "audit", "keys/issue"]
        for name in pages:
            response = page.goto(f"{gateway.url}/staff/{name}/")
            assert response.status == 200
            page.screenshot(path=screenshot_dir / f"admin-{name.replace('/', '-')}.png", full_page=True)
            if name == "replicas":
                assert "healthy" in page.locator("tbody").inner_text()
        assert errors == []
