"""The batch pages in headless Chromium at desktop and phone width: nothing scrolls sideways,
axe-core finds nothing (tests/support/browser_checks.py), the progress reads out, a cancel goes through
its confirmation, and the capacity page follows the batch work queued without a reload."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.contrib.auth import get_user_model

from fairness.models import AuditEntry, Batch, BatchLine, BatchStatus
from tests.support.batch_rows import carol_key, make_batch, stored_file
from tests.support.browser import TABLE_OVERFLOW, sign_in, sign_in_as_staff
from tests.support.browser_checks import check_page
from tests.support.cast import STAFF_PASSWORD
from tests.support.polling import wait_for

CAROL_PASSWORD = "carol's long password"
User = get_user_model()


def carols_batches(cast) -> dict[str, Batch]:
    """One batch in each state a page shows differently."""
    carol = User.objects.get(username="carol")
    carol.set_password(CAROL_PASSWORD)
    carol.save()
    key = carol_key(cast)
    output = stored_file(key.owner_id, b'{"custom_id": "req-0"}\n')
    errors = stored_file(key.owner_id, b'{"custom_id": "req-1"}\n')
    batches = {
        "running": make_batch(key, done=120, failed=3, pending=377, lately=60),
        "new": make_batch(key, BatchStatus.VALIDATING),
        "finished": make_batch(key, BatchStatus.COMPLETED, output_file=output, error_file=errors),
        "failed": make_batch(key, BatchStatus.FAILED, errors={"object": "list", "data": [
            {"code": "invalid_json_line", "line": 3, "message": "Line 3 of the input file is not valid JSON."}]}),
        "cancelled": make_batch(key, BatchStatus.CANCELLED, done=5, pending=20),
    }
    Batch.objects.filter(pk=batches["finished"].pk).update(total=40, completed=38, failed=2)
    return batches


@pytest.mark.browser
def test_my_batches_fit_a_phone_pass_axe_and_cancel_after_confirming(chromium, gateway, cast, screenshot_dir):
    batches = carols_batches(cast)
    running = batches["running"].public_id
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in(page, gateway.url, "/me/batches/", "carol", CAROL_PASSWORD)

        check_page(page, gateway.url + "/me/batches/")
        bar = page.get_by_role("progressbar", name=f"Progress of {running}")
        assert bar.get_attribute("aria-valuetext") == "120 done, 3 failed of 500"
        item = page.locator(f"#{running}").inner_text()
        assert "120 done, 3 failed of 500, about 31 min left" in item
        finished = page.locator(f"#{batches['finished'].public_id}")
        assert "38 done, 2 failed of 40" in finished.inner_text()
        assert finished.get_by_role("link", name="Download results").count() == 1
        assert "not valid JSON" in page.locator(f"#{batches['failed'].public_id}").inner_text()
        page.screenshot(path=screenshot_dir / "me-batches-phone.png", full_page=True)

        check_page(page, gateway.url + f"/me/batches/{running}/cancel/")
        page.get_by_role("button", name="Cancel batch").click()
        page.wait_for_url(gateway.url + "/me/batches/")
        assert f"Cancelling {running}" in page.locator(".messages").inner_text()
        assert "being cancelled" in page.locator(f"#{running}").inner_text()
        assert errors == []

    assert Batch.objects.get(public_id=running).status == BatchStatus.CANCELLING
    assert AuditEntry.objects.get(action="batch.cancel").actor_name == "carol"


@pytest.mark.browser
def test_staff_batches_fit_a_phone_pass_axe_and_cancel_after_confirming(chromium, gateway, cast, screenshot_dir):
    batches = carols_batches(cast)
    User.objects.create_user("sam", password=STAFF_PASSWORD, is_staff=True)
    running = batches["running"].public_id
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        sign_in_as_staff(page, gateway.url)

        check_page(page, gateway.url + "/staff/batches/")
        check_page(page, gateway.url + f"/staff/batches/{running}/cancel/")
        page.set_viewport_size({"width": 1280, "height": 900})
        page.goto(gateway.url + "/staff/batches/")
        assert page.evaluate(TABLE_OVERFLOW) <= 0, "the table scrolls sideways at 1280 px"
        assert "/me/files/" not in page.content()

        # On a phone the row's Cancel stays in reach at the table's right edge.
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(gateway.url + "/staff/batches/")
        page.screenshot(path=screenshot_dir / "staff-batches-phone.png", full_page=True)
        cancel = page.get_by_role("link", name=f"Cancel {running}")
        cancel.scroll_into_view_if_needed()
        box = cancel.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
        cancel.click()
        page.wait_for_url(gateway.url + f"/staff/batches/{running}/cancel/")
        page.get_by_role("button", name="Cancel batch").click()
        page.wait_for_url(gateway.url + "/staff/batches/")
        assert f"Cancelling {running} of carol" in page.locator(".messages").inner_text()
        assert errors == []

    entry = AuditEntry.objects.get(action="batch.cancel")
    assert (entry.actor_name, entry.target) == ("sam", running)
    assert Batch.objects.get(public_id=running).status == BatchStatus.CANCELLING


def in_another_thread(work: Callable[[], object]) -> None:
    """Database work while sync Playwright holds this thread (where Django refuses it)."""
    from django.db import connection

    failures: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's own thread
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive() and not failures, failures


@pytest.mark.browser
def test_the_capacity_page_follows_the_batch_work_without_a_reload(chromium, gateway, cast):
    batch = make_batch(carol_key(cast), pending=4, done=2)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(gateway.url + "/capacity/")
        work = page.locator("#batch-work")
        assert work.inner_text() == "Batch API work queued: 4 requests in 1 batch."

        in_another_thread(lambda: BatchLine.objects.filter(  # three of the four end
            pk__in=list(BatchLine.objects.filter(batch=batch, state="pending").values_list("pk", flat=True)[:3])
        ).update(state="done"))
        # The page polls /api/capacity every few seconds.
        wait_for(lambda: work.inner_text() == "Batch API work queued: 1 request in 1 batch.", timeout=20, interval=0.25,
                 what="the capacity page to refresh the batch work")
        in_another_thread(lambda: Batch.objects.filter(pk=batch.pk).update(status=BatchStatus.COMPLETED))
        wait_for(lambda: work.inner_text() == "No Batch API work queued.", timeout=20, interval=0.25,
                 what="the capacity page to see the batch finish")
        assert errors == []
