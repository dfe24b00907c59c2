"""/me/ shows the signed-in person's waiting requests live, in headless Chromium, with real
gateway and engine processes: they appear with their places while the engine is full, the
page never names anyone else's, and they leave the list once they run."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.actions.keys import issue_key
from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.engine_fill import fill_the_engine, free_the_engine
from tests.support.polling import wait_for
from tests.support.v1_calls import hanging_chat


@pytest.mark.browser
def test_my_waiting_requests_show_live_with_their_places(chromium, gateway, sim, two_slots, lab):
    user, tier, secret = lab
    other = get_user_model().objects.create(username="omar")
    _, other_secret = issue_key(other, tier, label="omar's key")
    signed_in = Client()
    signed_in.force_login(user)
    session = signed_in.cookies[settings.SESSION_COOKIE_NAME].value

    held = fill_the_engine(gateway, sim, secret, user, tier.name)
    try:
        held += [hanging_chat(gateway, other_secret)]
        held += [hanging_chat(gateway, secret) for _ in range(2)]
        wait_for(lambda: person_load(redis_sync()).get((user.pk, "lab")) == (2, 2), what="lena's two waiting")
        wait_for(lambda: person_load(redis_sync()).get((other.pk, "lab")) == (0, 1), what="omar's one waiting")
        with chromium() as browser:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": gateway.url}])
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(gateway.url + "/me/")
            rows = page.locator("#my-queue-rows tr")
            rows.nth(1).wait_for(timeout=10_000)
            assert rows.count() == 2  # lena's two; omar's is not hers to see
            places = [int(rows.nth(i).locator("td").nth(1).inner_text()) for i in range(2)]
            assert places == sorted(places) and len(set(places)) == 2 and max(places) <= 2
            assert all(rows.nth(i).locator("td").nth(3).inner_text() for i in range(2))
            # Once the engine is free they run, and the live list empties itself.
            free_the_engine(sim, held)
            held = []
            page.locator("#my-queue-none").wait_for(state="visible", timeout=15_000)
            assert page.locator("#my-queue-none").inner_text() == "None of your requests is waiting."
            assert not errors, errors
    finally:
        free_the_engine(sim, held)
