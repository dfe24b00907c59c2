"""A real OpenID provider (tests/oidc/provider.mjs, the npm package oidc-provider under Node.js)
and a live portal configured to sign in with it, both for the whole session.

The provider's accounts, their groups and its clock live in a JSON file the tests rewrite
(`Provider.set`); it reads the file at every request, so no restart between tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from fairness.models import Account, GroupMapping, Tier
from fairness.portal.signin import oidc_backend
from tests.support.gateway_process import GatewayProcess
from tests.support.oidc import CLIENT_ID, CLIENT_SECRET, Labs, Provider
from tests.support.polling import wait_for
from tests.support.processes import LOG_DIR, free_port, gateway_env

ROOT = Path(settings.BASE_DIR)


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


@pytest.fixture
def labs(tiers) -> Labs:
    nlp = Account.objects.create(name="nlp")
    vision = Account.objects.create(name="vision")
    shared = Account.objects.create(name="shared")
    standard = Tier.objects.get(name="interactive")
    GroupMapping.objects.create(group="nlp-lab", account=nlp, tier=standard)
    GroupMapping.objects.create(group="vision-lab", account=vision, tier=standard)
    return Labs(nlp, vision, shared, standard)
