"""The playground end to end in headless Chromium, with real gateway and engine processes: alice
signs in, opens /me/playground/, chats with the model her tier may use and sees the answer come in
pieces with its time to first token and tokens per second; both turns are recorded as her usage,
through her session's key; signing out stops that key at the gateway. Someone who may have no key
is told why. The page fits a desktop and a phone and passes axe, before and after a conversation."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth import get_user_model

from enginesim.process import start_enginesim
from fairness.accounting import usage
from fairness.actions import playground
from fairness.gateway.api_keys import hash_secret
from fairness.models import ApiKey, Replica, UsageRecord
from fairness.store.redis_clients import redis_sync
from tests.support.browser import sign_in
from tests.support.browser_checks import WIDTHS, accessibility_violations, check_page, sideways_overflow
from tests.support.cast import ALICE_PASSWORD, MODEL
from tests.support.polling import wait_for

User = get_user_model()
# A prompt the simulated engine answers at length (43 tokens: its length follows the prompt).
PROMPT = "Tell me a short story."
# How many times the answer's text changed on the page: more than once is a stream.
COUNT_CHANGES = """() => {
  window.answerChanges = 0;
  new MutationObserver(() => { window.answerChanges += 1; })
    .observe(document.getElementById("pg-transcript"), {childList: true, subtree: true, characterData: true});
}"""


def models_of(gateway_url: str, secret: str) -> list[str]:
    answer = httpx.get(gateway_url + "/v1/models", headers={"Authorization": f"Bearer {secret}"})
    return [m["id"] for m in answer.json()["data"]] if answer.status_code == 200 else []


def status_of(gateway_url: str, secret: str) -> int:
    return httpx.get(gateway_url + "/v1/models", headers={"Authorization": f"Bearer {secret}"}).status_code


def fits_and_passes(page) -> None:
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        assert sideways_overflow(page) <= 0, f"the playground scrolls sideways at {width} px"
        violations = accessibility_violations(page)
        assert not violations, f"the playground at {width} px: {violations}"


@pytest.mark.browser
def test_a_researcher_chats_in_the_playground_and_is_charged_for_it(chromium, gateway, cast, screenshot_dir):
    from playwright.sync_api import expect

    # Everything the database needs first: while the browser runs, Django refuses queries here.
    alice = User.objects.get(username="alice")
    alice.set_password(ALICE_PASSWORD)
    alice.save()
    User.objects.create_user("dave", password=ALICE_PASSWORD)  # no key, no tier: staff issue his first
    # At the engine's own pace (speed 1): a 43-token answer takes about half a second to arrive.
    with start_enginesim(model=MODEL, max_num_seqs=4, extra_args=["--default-max-tokens", "48"]) as engine:
        Replica.objects.create(name="sim-play", base_url=engine.url, model=MODEL, max_num_seqs=4)
        wait_for(lambda: MODEL in models_of(gateway.url, cast["alice"].secret), what="the gateway serving the model")

        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            handed: list[str] = []  # what the page's script was given, to try it at the gateway after
            page.on("response", lambda r: r.url.endswith("/me/playground/key") and handed.append(r.json()["key"]))
            sign_in(page, gateway.url, "/me/playground/", "alice", ALICE_PASSWORD)
            check_page(page, gateway.url + "/me/playground/")

            page.set_viewport_size({"width": 1280, "height": 900})
            expect(page.get_by_label("Model")).to_have_value(MODEL)
            assert page.get_by_label("Model").locator("option").all_inner_texts() == [MODEL]
            page.evaluate(COUNT_CHANGES)
            page.get_by_label("Your message").fill(PROMPT)
            page.get_by_role("button", name="Send").click()
            answer = page.locator(".turn.assistant").last
            expect(answer.locator(".figures")).to_contain_text("tokens per second", timeout=15_000)
            assert page.evaluate("window.answerChanges") > 3, "the answer came in one piece, not streamed"
            figures = answer.locator(".figures").inner_text()
            assert figures.startswith("First token after ") and "(43 tokens)" in figures
            assert len(answer.locator(".text").inner_text().split()) >= 10
            expect(page.get_by_role("log", name="Conversation")).to_have_attribute("aria-busy", "false")

            # A second turn carries the first: the conversation goes with each message.
            page.get_by_label("Your message").fill("And another?")
            page.get_by_label("Your message").press("Control+Enter")
            expect(page.locator(".turn.assistant .figures")).to_have_count(2, timeout=15_000)
            fits_and_passes(page)
            page.screenshot(path=screenshot_dir / "me-playground.png", full_page=True)

            secret = handed[-1]
            assert len(set(handed)) == 1 and page.locator("body").inner_text().find(secret) == -1
            assert page.evaluate("Object.keys(localStorage).length + Object.keys(sessionStorage).length") == 0
            page.set_viewport_size({"width": 1280, "height": 900})
            page.get_by_role("button", name="Sign out").click()
            page.wait_for_url(gateway.url + "/capacity/")
            wait_for(lambda: status_of(gateway.url, secret) == 401, timeout=5.0, what="the key refused at sign-out")

            # Someone who may have no key is told why, and the page loads no script to ask for one.
            asked = len(handed)
            sign_in(page, gateway.url, "/me/playground/", "dave", ALICE_PASSWORD)
            check_page(page, gateway.url + "/me/playground/")
            expect(page.get_by_role("status")).to_contain_text("issued by staff")
            assert len(handed) == asked and page.locator("#pg-form").count() == 0
            assert errors == []

    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    assert key.owner == alice and key.label == playground.LABEL and key.revoked_at is not None

    def both_recorded() -> list[UsageRecord]:
        usage.flush(redis_sync())
        return list(UsageRecord.objects.filter(key=key).order_by("pk")) if UsageRecord.objects.filter(
            key=key).count() == 2 else []

    first, second = wait_for(both_recorded, timeout=20, what="the playground's two requests recorded")
    assert {first.person_id, second.person_id} == {alice.pk} and first.stream and second.stream
    assert first.status == second.status == 200 and first.completion_tokens == 43
    assert first.ttft_ms is not None and first.replica == "sim-play"
    assert second.prompt_tokens > first.prompt_tokens + first.completion_tokens  # the first turn went along
