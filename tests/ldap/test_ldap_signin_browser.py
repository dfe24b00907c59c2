"""A directory user signs in on the password page in headless Chromium, against a live portal
process configured from GP_LDAP_* and a real slapd; a directory that cannot be reached is said
to be so on the same page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model

from fairness.models import Membership
from tests.support.gateway_process import GatewayProcess
from tests.support.ldap import PASSWORDS, Labs, Slapd, ldap_environment, needs_slapd
from tests.support.processes import start_gateway

pytestmark = needs_slapd
User = get_user_model()


@pytest.fixture
def ldap_portal(slapd: Slapd, live_db_url: str, redis_url: str, transactional_db) -> Iterator[GatewayProcess]:
    process = start_gateway(live_db_url, name="ldap-portal", **ldap_environment(slapd.uri))
    yield process
    process.stop()


@pytest.fixture
def unreachable_portal(live_db_url: str, redis_url: str, unreachable: str, slapd: Slapd,
                       transactional_db) -> Iterator[GatewayProcess]:
    process = start_gateway(live_db_url, name="ldap-portal-down", **ldap_environment(unreachable))
    yield process
    process.stop()


def password_sign_in(page, base_url: str, username: str, password: str) -> None:
    page.goto(base_url + "/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state("domcontentloaded")


@pytest.mark.browser
def test_a_directory_user_signs_in_on_the_password_page(chromium, ldap_portal: GatewayProcess, labs: Labs,
                                                        screenshot_dir):
    with chromium() as browser:
        page = browser.new_page()
        password_sign_in(page, ldap_portal.url, "alice", PASSWORDS["alice"])
        assert page.url == ldap_portal.url + "/me/"
        assert "alice" in page.locator("body").inner_text()
        page.screenshot(path=screenshot_dir / "ldap-signed-in.png", full_page=True)
    alice = User.objects.get(username="alice")
    assert [m.account.name for m in Membership.objects.filter(user=alice)] == ["nlp"]


@pytest.mark.browser
def test_the_page_says_when_the_directory_cannot_be_reached(chromium, unreachable_portal: GatewayProcess,
                                                            labs: Labs):
    with chromium() as browser:
        page = browser.new_page()
        password_sign_in(page, unreachable_portal.url, "alice", PASSWORDS["alice"])
        assert page.url.startswith(unreachable_portal.url + "/accounts/login/")
        assert "directory cannot be reached" in page.get_by_role("alert").inner_text()
