"""A real OpenLDAP directory (Debian's slapd) on a free loopback port, with its own configuration
and database in a temporary directory, for the whole session; its entries are put back from
directory.ldif before each test, so a test may delete people and change groups."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import ldap
import ldap.dn
import ldap.modlist
import ldif
import pytest
from django.test import override_settings

from fairness.actions.audit import Actor
from fairness.models import Account, GroupMapping, Tier
from tests.support.polling import wait_for
from tests.support.processes import LOG_DIR, free_port

SLAPD = Path("/usr/sbin/slapd")
SUFFIX = "dc=uni,dc=example"
ROOT_DN, ROOT_PASSWORD = f"cn=root,{SUFFIX}", "root-password-for-tests"
BIND_DN, BIND_PASSWORD = f"cn=portal,ou=services,{SUFFIX}", "portal-bind-password"
PASSWORDS = {"alice": "alice-directory-password", "bob": "bob-directory-password", "carol": "carol-directory-password",
             "dave": "dave-directory-password", "sam": "sams-directory-password", "admin": "admin-directory-password"}
LDIF = Path(__file__).with_name("directory.ldif")
SETUP = Actor(None, name="test-setup")

CONFIG = """\
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {home}/slapd.pid
database mdb
maxsize 16777216
suffix "{suffix}"
rootdn "{root_dn}"
rootpw {root_password}
directory {home}/db
access to attrs=userPassword by self write by anonymous auth by * none
access to * by users read by anonymous auth
"""

# Each test module's pytestmark: CI installs slapd (scripts/ensure-system.sh), so there they run.
needs_slapd = pytest.mark.skipif(not SLAPD.exists(), reason="slapd is not installed (Debian: apt-get install "
                                 "slapd ldap-utils; scripts/ensure-system.sh installs it)")


def user_dn(uid: str) -> str:
    return f"uid={uid},ou=people,{SUFFIX}"


def group_dn(cn: str) -> str:
    return f"cn={cn},ou=groups,{SUFFIX}"


@dataclass
class Slapd:
    uri: str
    process: subprocess.Popen

    def admin(self):
        conn = ldap.initialize(self.uri, bytes_mode=False)
        conn.simple_bind_s(ROOT_DN, ROOT_PASSWORD)
        return conn

    def reset(self) -> None:
        """Every entry as directory.ldif has it (the suffix itself stays)."""
        conn = self.admin()
        try:
            found = conn.search_s(SUFFIX, ldap.SCOPE_SUBTREE, "(objectClass=*)", ["1.1"])
            for dn, _ in sorted(found, key=lambda entry: -len(ldap.dn.str2dn(entry[0]))):
                if dn.lower() != SUFFIX:
                    conn.delete_s(dn)
            for dn, attrs in _entries():
                if dn.lower() != SUFFIX:
                    conn.add_s(dn, ldap.modlist.addModlist(attrs))
        finally:
            conn.unbind_s()

    def delete(self, dn: str) -> None:
        conn = self.admin()
        conn.delete_s(dn)
        conn.unbind_s()

    def remove_member(self, group: str, uid: str) -> None:
        conn = self.admin()
        conn.modify_s(group_dn(group), [(ldap.MOD_DELETE, "member", [user_dn(uid).encode()])])
        conn.unbind_s()


def _entries() -> list[tuple[str, dict[str, list[bytes]]]]:
    with open(LDIF, "rb") as source:
        parser = ldif.LDIFRecordList(source)
        parser.parse()
    return parser.all_records


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


def ldap_settings(uri: str, group_type: str = "groupOfNames") -> dict[str, object]:
    """What the portal's settings hold with GP_LDAP_* set (for override_settings in-process)."""
    return {
        "GP_LDAP_SERVER_URI": uri, "GP_LDAP_BIND_DN": BIND_DN, "GP_LDAP_BIND_PASSWORD": BIND_PASSWORD,
        "GP_LDAP_USER_SEARCH_BASE": f"ou=people,{SUFFIX}", "GP_LDAP_USER_FILTER": "(uid=%(user)s)",
        "GP_LDAP_GROUP_SEARCH_BASE": f"ou=groups,{SUFFIX}", "GP_LDAP_GROUP_TYPE": group_type,
        "GP_LDAP_START_TLS": False, "GP_LDAP_TIMEOUT_SECONDS": 2.0,
        "AUTHENTICATION_BACKENDS": ["django.contrib.auth.backends.ModelBackend",
                                    "fairness.portal.signin.ldap_backend.DirectoryBackend"],
    }


def ldap_environment(uri: str) -> dict[str, str]:
    """The same, as a portal process's environment."""
    return {name: str(value) for name, value in ldap_settings(uri).items()
            if name.startswith("GP_LDAP_") and not isinstance(value, bool)}


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


@dataclass
class Labs:
    nlp: Account
    vision: Account
    hpc: Account
    standard: Tier
    batch: Tier


@pytest.fixture
def labs(tiers) -> Labs:
    """nlp-lab mapped by its DN, vision-lab and the posixGroup hpc-users by their cn."""
    nlp, vision, hpc = (Account.objects.create(name=name) for name in ("nlp", "vision", "hpc"))
    GroupMapping.objects.create(group=group_dn("nlp-lab"), account=nlp, tier=tiers["interactive"])
    GroupMapping.objects.create(group="vision-lab", account=vision, tier=tiers["batch"])
    GroupMapping.objects.create(group="hpc-users", account=hpc, tier=tiers["batch"])
    return Labs(nlp, vision, hpc, tiers["interactive"], tiers["batch"])
