"""A real OpenLDAP directory (Debian's slapd) on a free loopback port, with its own configuration
and database in a temporary directory, for the whole session; its entries are put back from
directory.ldif before each test, so a test may delete people and change groups."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import ldap
import pytest
from django.test import override_settings

from fairness.models import Account, GroupMapping
from tests.support.ldap import (
    CONFIG,
    LDIF,
    ROOT_DN,
    ROOT_PASSWORD,
    SLAPD,
    SUFFIX,
    Labs,
    Slapd,
    group_dn,
    ldap_settings,
)
from tests.support.polling import wait_for
from tests.support.processes import LOG_DIR, free_port


@pytest.fixture(scope="session")
def slapd_server() -> Iterator[Slapd]:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="slapd-", dir=LOG_DIR))
    (home / "db").mkdir()
    config = home / "slapd.conf"
    config.write_text(CONFIG.format(home=home, suffix=SUFFIX, root_dn=ROOT_DN, root_password=ROOT_PASSWORD))
    # Loaded offline, before the server starts: fast, and no bind needed.
    subprocess.run(["/usr/sbin/slapadd", "-f", str(config), "-l", str(LDIF)],
                   check=True, capture_output=True)
    uri = f"ldap://127.0.0.1:{free_port()}"
    log = open(home / "slapd.log", "wb")  # noqa: SIM115 -- the process writes to it until the end
    # -d 0: in the foreground (no fork), so the fixture holds the process itself.
    process = subprocess.Popen([str(SLAPD), "-f", str(config), "-h", uri + "/", "-d", "0"],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = Slapd(uri, process)

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"slapd exited:\n{(home / 'slapd.log').read_text(errors='replace')}")
        try:
            server.admin().unbind_s()
            return True
        except ldap.SERVER_DOWN:
            return False

    wait_for(answers, timeout=20, what="slapd")
    yield server
    process.terminate()
    process.wait(timeout=10)
    log.close()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def slapd(slapd_server: Slapd) -> Iterator[Slapd]:
    """The directory as directory.ldif has it, and the portal signing in with it."""
    slapd_server.reset()
    with override_settings(**ldap_settings(slapd_server.uri)):
        yield slapd_server


@pytest.fixture
def unreachable() -> str:
    """An LDAP address where nothing listens."""
    return f"ldap://127.0.0.1:{free_port()}"


@pytest.fixture
def labs(tiers) -> Labs:
    """nlp-lab mapped by its DN, vision-lab and the posixGroup hpc-users by their cn."""
    nlp, vision, hpc = (Account.objects.create(name=name) for name in ("nlp", "vision", "hpc"))
    GroupMapping.objects.create(group=group_dn("nlp-lab"), account=nlp, tier=tiers["interactive"])
    GroupMapping.objects.create(group="vision-lab", account=vision, tier=tiers["batch"])
    GroupMapping.objects.create(group="hpc-users", account=hpc, tier=tiers["batch"])
    return Labs(nlp, vision, hpc, tiers["interactive"], tiers["batch"])
