"""The callback's answer to an error in its query string: the provider's error text never shown
(anyone can write a link to the callback with text of their choosing, and it would read as the
portal's), and nobody signed out by it. Against the real provider and a live portal."""

from __future__ import annotations

import httpx

from tests.support.oidc import Labs, Provider, signed_in_as, sso_sign_in


def test_an_error_answer_nobody_asked_for_shows_none_of_its_text_and_keeps_the_session(
        sso_portal, oidc_provider: Provider, labs: Labs):
    oidc_provider.set({"rosa": ["nlp-lab"]})
    bait = "Your account is locked. Call the helpdesk at +1 555 0100 and give them your password"
    with sso_sign_in(sso_portal.url, "rosa") as (client, _):
        answer = client.get(sso_portal.url + "/oidc/callback/",
                            params={"error": "access_denied", "error_description": bait, "state": "made-up"})
        assert answer.status_code == 400
        assert "helpdesk" not in answer.text and "access_denied" not in answer.text
        assert "not started in this browser" in answer.text
        assert signed_in_as(client, sso_portal.url) == "rosa"

        # The provider's own error answer to a sign-in this browser started: our words, not its.
        start = client.get(sso_portal.url + "/oidc/authenticate/")
        state = httpx.URL(start.headers["location"]).params["state"]
        answer = client.get(sso_portal.url + "/oidc/callback/",
                            params={"error": "access_denied", "error_description": bait, "state": state})
        assert answer.status_code == 403 and "helpdesk" not in answer.text
        assert "did not sign you in" in answer.text
        assert signed_in_as(client, sso_portal.url) == "rosa"
