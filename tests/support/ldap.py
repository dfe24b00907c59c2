"""The OpenLDAP directory the sign-in tests run against: its names and passwords, the entries of
tests/ldap/directory.ldif, a handle on the running slapd, and the portal's settings for it."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import ldap
import ldap.dn
import ldap.modlist
import ldif
import pytest

from fairness.models import Account, Tier

SLAPD = Path("/usr/sbin/slapd")
SUFFIX = "dc=uni,dc=example"
ROOT_DN, ROOT_PASSWORD = f"cn=root,{SUFFIX}", "root-password-for-tests"
BIND_DN, BIND_PASSWORD = f"cn=portal,ou=services,{SUFFIX}", "portal-bind-password"
PASSWORDS = {"alice": "alice-directory-password", "bob": "bob-directory-password", "carol": "carol-directory-password",
             "dave": "dave-directory-password", "sam": "sams-directory-password", "admin": "admin-directory-password"}
LDIF = Path(__file__).resolve().parents[1] / "ldap" / "directory.ldif"

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


@dataclass
class Labs:
    nlp: Account
    vision: Account
    hpc: Account
    standard: Tier
    batch: Tier
