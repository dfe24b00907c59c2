"""Every staff page, and the account pages, in headless Chromium at desktop and phone width:
nothing scrolls sideways and axe-core finds no violation (tests/support/browser_checks.py). Also: staff
land on the staff home after signing in, row actions stay reachable on a phone, and the keys
page's live figures refresh without a reload."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest
import redis
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.actions.audit import Actor
from fairness.actions.keys import rotate
from fairness.actions.users import set_user_active
from fairness.models import ApiKey, Replica, SaturationAlert
from fairness.store import heartbeats
from fairness.store.keyspace import ADMISSION_NAMESPACE, ADMISSION_QUEUED_BY_KEY
from fairness.telemetry import polling
from tests.support.browser import TABLE_OVERFLOW, sign_in_as_staff
from tests.support.browser_checks import check_page
from tests.support.cast import MODEL, STAFF_PASSWORD
from tests.support.dcgm_exporter import DcgmExporter

User = get_user_model()


def busy_portal(cast, gpu_metrics_url: str = "") -> dict[str, str]:
    """Something on every page: a key in its grace period, one expiring, open and resolved
    alerts, a draining and a disabled replica beside the live one (with its GPU exporter, when
    given), a deactivated user."""
    staff = User.objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    actor = Actor(staff, "127.0.0.1")
    now = timezone.now()
    carol = ApiKey.objects.get(pk=cast["carol"].key_id)
    rotate(actor, carol, grace_seconds=3600)
    bob = ApiKey.objects.get(pk=cast["bob"].key_id)
    bob.expires_at = now + dt.timedelta(days=3)
    bob.label = "a rather long label that a narrow screen has to wrap somewhere sensible"
    bob.save()
    for n in range(2):
        SaturationAlert.objects.create(model=MODEL, kind=SaturationAlert.Kind.QUEUE, opened_at=now,
                                       figures={"waiting": 40 + n, "running": 8, "ratio": 5.0})
    SaturationAlert.objects.create(model=MODEL, kind=SaturationAlert.Kind.KV, opened_at=now - dt.timedelta(hours=2),
                                   resolved_at=now - dt.timedelta(hours=1), figures={"kv_usage": 0.97})
    Replica.objects.create(name="sim-drain", base_url="http://127.0.0.1:9", model="other", draining=True)
    Replica.objects.create(name="sim-off", base_url="http://127.0.0.1:9", model="other", enabled=False)
    dora = User.objects.create_user("dora")
    set_user_active(actor, dora, False)
    Replica.objects.filter(name="sim-a").update(gpu_metrics_url=gpu_metrics_url)
    asyncio.run(polling.poll_once())  # what the poll task does: the replica page shows health
    return {"carol": carol.prefix, "bob": bob.prefix, "carol_unit": f"p{carol.owner_id}.{carol.tier.name}"}


@pytest.mark.browser
def test_every_staff_page_fits_a_phone_and_passes_axe(chromium, gateway, replica, cast, redis_url):
    with DcgmExporter() as exporter:
        found = busy_portal(cast, exporter.url)
    # The worker stopped ten minutes ago: the staff home's "Background work" shows a problem, long words and all.
    heartbeats.record(redis.Redis.from_url(redis_url), heartbeats.PERIODIC, clock=lambda: time.time() - 600)
    pages = [
        "/staff/", "/staff/keys/", "/staff/keys/?state=all&sort=owner", "/staff/keys/issue/?owner=carol",
        f"/staff/keys/{found['bob']}/rotate/", f"/staff/keys/{found['bob']}/revoke/",
        "/staff/users/", "/staff/users/new/", "/staff/users/dora/password/",
        "/staff/tiers/", "/staff/tiers/new/", "/staff/tiers/batch/edit/",
        "/staff/replicas/", "/staff/replicas/new/", "/staff/replicas/sim-a/edit/",
        "/staff/replicas/sim-a/disable/", "/staff/replicas/sim-off/delete/",
        "/staff/alerts/", "/staff/audit/", "/staff/tokens/", "/staff/tokens/issue/",
        "/accounts/password/", "/accounts/password/done/",
    ]
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        check_page(page, gateway.url + "/accounts/login/")
        sign_in_as_staff(page, gateway.url)
        for path in pages:
            check_page(page, gateway.url + path)
        page.goto(gateway.url + "/staff/")
        assert page.locator(".badge.warn", has_text="problem").count() == 1
        page.goto(gateway.url + "/staff/replicas/")
        # Only the replica that names an exporter has a GPU line.
        assert page.locator("tbody .detail.gpu").all_inner_texts() == [
            "2 GPUs: 71% busy, 141 of 158 GiB, 600 W, hottest 71 °C"]
        assert errors == []


@pytest.mark.browser
def test_row_actions_stay_reachable_on_a_phone_and_in_view_on_a_desktop(chromium, gateway, replica, cast,
                                                                       redis_url):
    found = busy_portal(cast)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        sign_in_as_staff(page, gateway.url)
        for path in ("/staff/keys/?state=all", "/staff/users/", "/staff/replicas/", "/staff/audit/"):
            page.goto(gateway.url + path)
            assert page.evaluate(TABLE_OVERFLOW) <= 0, f"{path}: the table scrolls sideways at 1280 px"

        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(gateway.url + "/staff/keys/")
        revoke = page.get_by_role("link", name=f"Revoke {found['bob']}")
        revoke.scroll_into_view_if_needed()
        box = revoke.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
        revoke.click()
        page.wait_for_url(f"{gateway.url}/staff/keys/{found['bob']}/revoke/")

        page.goto(gateway.url + "/staff/replicas/")
        page.get_by_role("link", name="Disable sim-a").click()
        page.wait_for_url(gateway.url + "/staff/replicas/sim-a/disable/")


# Each row of a page's table whose name (its row header) or actions are out of the table's box,
# or overlap: on a phone the actions held at the right edge once covered every name.
ROWS_NOT_IN_VIEW = """() => {
    const box = document.querySelector('.table-scroll').getBoundingClientRect();
    const inside = r => r.left >= box.left - 1 && r.right <= box.right + 1 && r.width > 0;
    return [...document.querySelectorAll('.table-scroll tbody tr')].filter(tr => tr.querySelector('td.actions'))
        .map(tr => {
            const name = tr.querySelector('th[scope=row]').getBoundingClientRect();
            const actions = tr.querySelector('td.actions').getBoundingClientRect();
            return {row: tr.querySelector('th[scope=row]').innerText.slice(0, 40), name: inside(name),
                    actions: inside(actions), apart: name.right <= actions.left + 1};
        }).filter(r => !(r.name && r.actions && r.apart));
}"""


@pytest.mark.browser
def test_each_rows_name_and_actions_are_both_in_view_on_a_phone_and_a_desktop(chromium, gateway, replica, cast,
                                                                             redis_url):
    busy_portal(cast)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        sign_in_as_staff(page, gateway.url)
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 844})
            for path in ("/staff/users/", "/staff/keys/?state=all", "/staff/replicas/"):
                page.goto(gateway.url + path)
                assert page.evaluate(ROWS_NOT_IN_VIEW) == [], f"{path} at {width} px"


@pytest.mark.browser
def test_on_a_phone_the_navigation_folds_behind_a_menu_button(chromium, gateway, replica, cast, redis_url):
    busy_portal(cast)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        sign_in_as_staff(page, gateway.url)
        page.goto(gateway.url + "/staff/")
        header = page.locator("header.site")
        menu = header.get_by_role("button", name="Menu")
        box = header.bounding_box()
        assert box is not None and box["height"] < 100  # it was 260 px of 844 with the links in 8 lines
        assert not header.get_by_role("link", name="Users").is_visible()
        menu.click()
        assert menu.get_attribute("aria-expanded") == "true"
        header.get_by_role("link", name="Users").click()
        page.wait_for_url(gateway.url + "/staff/users/")
        page.set_viewport_size({"width": 1280, "height": 900})  # a desktop: no button, every link in view
        assert not header.get_by_role("button", name="Menu").is_visible()
        assert header.get_by_role("link", name="Audit").is_visible()


@pytest.mark.browser
def test_the_keys_pages_live_figures_refresh_without_a_reload(chromium, gateway, replica, cast, redis_url):
    from playwright.sync_api import expect

    found = busy_portal(cast)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        sign_in_as_staff(page, gateway.url)
        page.goto(gateway.url + "/staff/keys/")
        cell = page.locator(f'tr[data-prefix="{found["carol"]}"] td[data-figure="queued"]')
        expect(cell).to_have_text("0")
        grading = redis.Redis.from_url(redis_url)
        try:
            grading.hset(ADMISSION_NAMESPACE + ADMISSION_QUEUED_BY_KEY, found["carol_unit"], 6)
            expect(cell).to_have_text("6", timeout=15_000)  # the page polls every 5 s
        finally:
            grading.close()
        expect(page.locator("#keys-status")).not_to_have_class("stale")


@pytest.mark.browser
def test_the_key_forms_account_list_follows_the_chosen_owner(chromium, gateway, replica, cast, redis_url):
    from fairness.models import Account, Membership

    User.objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    for name, user in (("nlp", "carol"), ("vision", "bob"), ("speech", "bob")):
        Membership.objects.create(account=Account.objects.create(name=name), user=User.objects.get(username=user))
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 390, "height": 844})
        sign_in_as_staff(page, gateway.url)
        page.goto(gateway.url + "/staff/keys/issue/?owner=carol")
        account = page.get_by_label("Account")
        offered = lambda: [o for o in account.locator("option").all_text_contents()]  # noqa: E731
        assert offered() == ["The owner's default account", "carol", "nlp"]
        page.get_by_label("Owner").select_option("bob")
        assert offered() == ["The owner's default account", "bob", "speech", "vision"]
        account.select_option("vision")
        page.get_by_label("Owner").select_option("alice")  # in none of bob's
        assert offered() == ["The owner's default account", "alice"]
        assert account.input_value() == ""
