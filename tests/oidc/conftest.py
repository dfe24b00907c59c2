"""A real OpenID provider (tests/oidc/provider.mjs, the npm package oidc-provider under Node.js)
and a live portal configured to sign in with it, both for the whole session.

The provider's accounts, their groups and its clock live in a JSON file the tests rewrite
(`Provider.set`); it reads the file at every request, so no restart between tests."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.test import Client

from fairness.actions.audit import Actor
from fairness.models import Account, GroupMapping, Tier
from fairness.portal.signin import oidc_backend
from tests.support.gateway_process import GatewayProcess
from tests.support.polling import wait_for
from tests.support.processes import LOG_DIR, free_port, gateway_env

ROOT = Path(settings.BASE_DIR)
CLIENT_ID = "gpuportal-tests"
CLIENT_SECRET = "a-client-secret-for-tests-only"
STAFF_IP = "127.0.0.7"  # where the in-process staff pages are used from (the audit log records it)
SETUP = Actor(None, name="test-setup")


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


def _ensure_provider_installed() -> None:
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed: the OIDC tests need it to run their provider "
                    "(Debian: apt-get install nodejs npm).")
    subprocess.run([str(ROOT / "scripts" / "ensure-oidc-provider.sh")], check=True, cwd=ROOT)


@pytest.fixture(scope="session")
def oidc_provider() -> Iterator[Provider]:
    _ensure_provider_installed()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    port, web_port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{port}"
    state_file = LOG_DIR / f"oidc-state-{port}.json"
    log_path = LOG_DIR / f"oidc-provider-{port}.log"
    env = {
        **os.environ, "OIDC_PORT": str(port), "OIDC_ISSUER": issuer, "OIDC_CLIENT_ID": CLIENT_ID,
        "OIDC_CLIENT_SECRET": CLIENT_SECRET, "OIDC_STATE_FILE": str(state_file),
        "OIDC_REDIRECT_URI": f"http://127.0.0.1:{web_port}/oidc/callback/",
        "OIDC_PROVIDER_MODULES": str(ROOT / "var" / "oidc-provider"),
    }
    log = open(log_path, "wb")  # noqa: SIM115 -- the process writes to it until the end
    process = subprocess.Popen(["node", str(Path(__file__).with_name("provider.mjs"))], cwd=ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    provider = Provider(issuer, web_port, state_file, process, log_path)
    provider.set({})

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the OIDC provider exited:\n{log_path.read_text(errors='replace')}")
        try:
            return httpx.get(oidc_backend.discovery_url(issuer), timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(ready, timeout=30, what="the OIDC provider")
    yield provider
    process.terminate()
    process.wait(timeout=10)
    log.close()
    state_file.unlink(missing_ok=True)


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


@pytest.fixture(scope="session")
def sso_portal_session(oidc_provider: Provider, live_db_url: str) -> Iterator[GatewayProcess]:
    env = gateway_env(live_db_url, GP_OIDC_ISSUER=oidc_provider.issuer, GP_OIDC_CLIENT_ID=CLIENT_ID,
                      GP_OIDC_CLIENT_SECRET=CLIENT_SECRET, GP_OIDC_TIMEOUT_SECONDS="5")
    process = GatewayProcess(oidc_provider.web_port, env, LOG_DIR / f"sso-portal-{oidc_provider.web_port}.log")
    yield process
    process.stop()


@pytest.fixture
def sso_portal(sso_portal_session: GatewayProcess, oidc_provider: Provider, transactional_db,
               redis_url: str) -> GatewayProcess:
    """The live portal signing in with the provider, over committed data; Redis, the tables and
    the provider's accounts fresh for each test."""
    oidc_provider.set({})
    return sso_portal_session


@pytest.fixture(autouse=True)
def _fresh_discovery() -> Iterator[None]:
    oidc_backend.forget_discovery()
    yield
    oidc_backend.forget_discovery()


@dataclass
class Labs:
    nlp: Account
    vision: Account
    shared: Account  # an account no group maps to: staff's hand only
    standard: Tier


@pytest.fixture
def labs(tiers) -> Labs:
    nlp = Account.objects.create(name="nlp")
    vision = Account.objects.create(name="vision")
    shared = Account.objects.create(name="shared")
    standard = Tier.objects.get(name="interactive")
    GroupMapping.objects.create(group="nlp-lab", account=nlp, tier=standard)
    GroupMapping.objects.create(group="vision-lab", account=vision, tier=standard)
    return Labs(nlp, vision, shared, standard)
