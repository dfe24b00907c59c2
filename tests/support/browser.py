"""Headless Chromium for the browser tests: Debian's build (never Playwright's download, which
fails offline) with the switches that keep it quiet and off the network; and what those tests do
on the portal's pages: sign in, measure a table, try a key made there through the gateway."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.cast import MODEL, STAFF_PASSWORD

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
# How far the page's table scrolls sideways inside its box (0: it fits).
TABLE_OVERFLOW = ("(() => { const box = document.querySelector('.table-scroll');"
                  " return box.scrollWidth - box.clientWidth; })()")


@contextmanager
def launch_chromium() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def sign_in(page, base_url: str, path: str, username: str, password: str, screenshot: Path | None = None) -> None:
    """Visit a page, get sent to the sign-in form, sign in, land back on the page."""
    page.goto(base_url + path)
    assert "/accounts/login/" in page.url
    if screenshot:
        page.screenshot(path=screenshot, full_page=True)
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(base_url + path)


def ask(secret: str, gateway_url: str) -> str:
    """One chat completion through the gateway with `secret` (a key made in the browser): its reply."""
    import openai  # the SDK only for the tests that ask

    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=secret, max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=8)
    return reply.choices[0].message.content or ""


def sign_in_as_staff(page, base_url: str) -> None:
    """Straight to the sign-in form, with no `next`: staff land on the staff home."""
    page.goto(base_url + "/accounts/login/")
    page.fill("#id_username", "sam")
    page.fill("#id_password", STAFF_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(base_url + "/staff/")

