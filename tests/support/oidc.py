"""The OpenID provider the sign-in tests run against (tests/oidc/provider.mjs): its client, a handle
on it that sets who can sign in, the redirect round trip a browser makes (by httpx), and the
portal's settings for it."""

from __future__ import annotations

import html
import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from django.test import Client

from fairness.models import Account, Tier

CLIENT_ID = "gpuportal-tests"
CLIENT_SECRET = "a-client-secret-for-tests-only"
STAFF_IP = "127.0.0.7"  # where the in-process staff pages are used from (the audit log records it)


@dataclass
class Provider:
    issuer: str
    web_port: int
    state_file: Path
    process: subprocess.Popen
    log_path: Path

    def set(self, accounts: dict[str, list[str]], clock_offset_seconds: int = 0,
            usernames: dict[str, str] | None = None) -> None:
        """Who can sign in ({login: groups}; the login is their subject and, unless `usernames`
        gives another, their preferred_username), and how far behind the provider's clock runs."""
        usernames = usernames or {}
        state = {"accounts": {name: {"email": f"{name}@uni.example", "groups": groups,
                                     "username": usernames.get(name, name)}
                              for name, groups in accounts.items()},
                 "clock_offset_seconds": clock_offset_seconds}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state_file)  # never half a file for the provider to read


_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*method="post">\s*<input type="hidden" name="prompt" value="(\w+)"')


def sign_in_over_http(client: httpx.Client, portal_url: str, login: str) -> httpx.Response:
    """The redirect round trip a browser makes, by httpx (no Chromium needed): the portal's SSO
    start, the provider's development login form (any password; consent when it asks), and back
    through the portal's callback. Returns the portal's last answer: the page it sends a signed-in
    person to, or the callback's refusal."""
    answer = client.get(portal_url + "/oidc/authenticate/", follow_redirects=True)
    for _ in range(3):  # the login form, then perhaps a consent form
        form = _FORM.search(answer.text) if not str(answer.url).startswith(portal_url) else None
        if form is None:
            return answer
        fields = {"prompt": form.group(2)}
        if form.group(2) == "login":
            fields.update(login=login, password="anything")
        answer = client.post(str(answer.url.join(html.unescape(form.group(1)))), data=fields, follow_redirects=True)
    raise AssertionError(f"the provider kept asking: {answer.text[:500]}")


def pages_as(user) -> Client:
    """The staff pages in-process, signed in as `user`, from a known address (the audit log's)."""
    client = Client(REMOTE_ADDR=STAFF_IP)
    client.force_login(user)
    return client


def signed_in_as(client: httpx.Client, portal_url: str) -> str | None:
    """Whom the portal's session in this client belongs to (None: nobody)."""
    page = client.get(portal_url + "/me/")
    if page.status_code != 200:
        return None
    found = re.search(r"Signed in as (.+?)\. ", page.text)
    assert found, page.text[:500]
    return found.group(1)


@contextmanager
def sso_sign_in(portal_url: str, login: str) -> Iterator[tuple[httpx.Client, httpx.Response]]:
    """A fresh browser-like client signed in (or refused) as the provider's `login`."""
    with httpx.Client(timeout=15) as client:
        yield client, sign_in_over_http(client, portal_url, login)


def sso_settings(issuer: str) -> dict[str, object]:
    """What the portal's settings hold with GP_OIDC_* set (for override_settings in-process)."""
    return {
        "GP_OIDC_ISSUER": issuer, "GP_OIDC_CLIENT_ID": CLIENT_ID, "GP_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_RP_CLIENT_ID": CLIENT_ID, "OIDC_RP_CLIENT_SECRET": CLIENT_SECRET, "GP_OIDC_TIMEOUT_SECONDS": 2.0,
        "AUTHENTICATION_BACKENDS": ["django.contrib.auth.backends.ModelBackend",
                                    "fairness.portal.signin.oidc_backend.SsoBackend"],
    }


@dataclass
class Labs:
    nlp: Account
    vision: Account
    shared: Account  # an account no group maps to: staff's hand only
    standard: Tier
