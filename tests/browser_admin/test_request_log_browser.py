"""The request log in headless Chromium at desktop and phone width (staff's, one's own, and a
request's timeline): nothing scrolls sideways and axe-core finds no violation; the filters and
the pager work from the page itself."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.models import ApiKey, UsageRecord
from tests.support.browser import sign_in, sign_in_as_staff
from tests.support.browser_checks import check_page, open_settled
from tests.support.cast import ALICE_PASSWORD, STAFF_PASSWORD

User = get_user_model()


def a_busy_log(cast) -> dict[str, str]:
    """Sixty of alice's requests over the last hour (every way of ending and of waiting, a long
    model name among them), and one of bob's."""
    now = timezone.now()
    alice_key = ApiKey.objects.get(pk=cast["alice"].key_id)
    endings = [("done", 200, ""), ("refused", 429, "queue_timeout"), ("client_gone", 499, ""),
               ("engine_error", 502, ""), ("shutdown", 499, "")]
    holds = ["", "person_cap", "tier_pool", "no_slot", "fair_share_order"]
    for n in range(60):
        ended, status, refusal = endings[n % 5]
        UsageRecord.objects.create(
            key=alice_key, person_id=alice_key.owner_id, request_id=f"req-alice-{n:03d}", endpoint="chat/completions",
            model="a-model-with-a-rather-long-name-that-has-to-wrap/instruct-v2" if n % 7 == 0 else "sim",
            replica="" if ended == "refused" else "card-0", status=status, ended=ended, refusal=refusal,
            held_by=holds[n % 5], queued_ms=1200 * (n % 5), queue_estimate_ms=1000 if n % 5 else None,
            ttft_ms=None if ended == "refused" else 1200 * (n % 5) + 300, latency_ms=6000, prompt_tokens=1234,
            cached_tokens=200, completion_tokens=321, tier="interactive", created_at=now - dt.timedelta(minutes=n),
        )
    bob_key = ApiKey.objects.get(pk=cast["bob"].key_id)
    UsageRecord.objects.create(key=bob_key, person_id=bob_key.owner_id, request_id="req-bob-1", endpoint="embeddings",
                               model="sim", status=200, ended="done", created_at=now)
    User.objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    return {"waited": "req-alice-003", "refused": "req-alice-001"}


@pytest.mark.browser
def test_the_request_log_and_a_timeline_fit_a_phone_and_pass_axe(chromium, gateway, replica, cast):
    found = a_busy_log(cast)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in_as_staff(page, gateway.url)
        for path in ("/staff/requests/", "/staff/requests/?person=alice&ended=refused",
                     "/staff/requests/?status=oops", f"/staff/requests/{found['waited']}/",
                     f"/staff/requests/{found['refused']}/", "/staff/", "/staff/usage/"):
            check_page(page, gateway.url + path)

        # The form and the pager, used as a person would.
        open_settled(page, gateway.url + "/staff/requests/")
        page.fill("#log-person", "alice")
        page.select_option("#log-ended", "engine_error")
        page.get_by_role("button", name="Show").click()
        page.wait_for_url("**/staff/requests/?*ended=engine_error*")
        assert page.locator("tbody tr").count() == 12
        open_settled(page, gateway.url + "/staff/requests/?person=alice")
        assert page.locator("tbody tr").count() == 50
        page.get_by_role("link", name="Older requests").click()
        page.wait_for_url("**before=*")
        assert page.locator("tbody tr").count() == 10
        page.locator("tbody tr").first.get_by_role("link").click()
        page.wait_for_url("**/staff/requests/req-alice-050/")
        assert page.get_by_role("heading", name="Timeline").is_visible()

        mine = browser.new_page(viewport={"width": 1280, "height": 900})
        sign_in(mine, gateway.url, "/me/requests/", "alice", ALICE_PASSWORD)
        for path in ("/me/requests/", "/me/requests/?ended=client_gone", f"/me/requests/{found['waited']}/", "/me/"):
            check_page(mine, gateway.url + path)
        assert "req-bob-1" not in mine.content()
        assert errors == []
