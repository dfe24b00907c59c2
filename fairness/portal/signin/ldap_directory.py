"""The institution's LDAP directory, as GP_LDAP_* describe it: django-auth-ldap's settings for the
sign-in, and the look-up the periodic sync makes with the same searches.

Every failure to reach or search the directory is a DirectoryUnavailable, never an empty answer:
"this person is not in the directory" must only ever mean that the directory said so.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ldap
from django.conf import settings
from django_auth_ldap.config import GroupOfNamesType, LDAPGroupType, LDAPSearch, PosixGroupType

GROUP_TYPES: dict[str, tuple[type[LDAPGroupType], str]] = {
    "groupOfNames": (GroupOfNamesType, "(objectClass=groupOfNames)"),
    "posixGroup": (PosixGroupType, "(objectClass=posixGroup)"),
}


class DirectoryUnavailable(Exception):
    """The directory could not be reached, refused the portal's own bind, or failed a search."""


def library_settings() -> dict[str, Any]:
    """django-auth-ldap's settings (its AUTH_LDAP_* names without the prefix), read from ours at
    every use, so a test's override_settings applies at once."""
    group_type, group_class = GROUP_TYPES[settings.GP_LDAP_GROUP_TYPE]
    timeout = settings.GP_LDAP_TIMEOUT_SECONDS
    return {
        "SERVER_URI": settings.GP_LDAP_SERVER_URI,
        "BIND_DN": settings.GP_LDAP_BIND_DN,
        "BIND_PASSWORD": settings.GP_LDAP_BIND_PASSWORD,
        "START_TLS": settings.GP_LDAP_START_TLS,
        # Referrals off: Active Directory's would be followed with no credentials.
        "CONNECTION_OPTIONS": {ldap.OPT_NETWORK_TIMEOUT: timeout, ldap.OPT_TIMEOUT: timeout, ldap.OPT_REFERRALS: 0},
        # The filter's %(user)s is escaped by the library (RFC 4515): a `*` or `)` in a username
        # matches itself, never anyone else.
        "USER_SEARCH": LDAPSearch(settings.GP_LDAP_USER_SEARCH_BASE, ldap.SCOPE_SUBTREE, settings.GP_LDAP_USER_FILTER),
        "GROUP_SEARCH": LDAPSearch(settings.GP_LDAP_GROUP_SEARCH_BASE, ldap.SCOPE_SUBTREE, group_class),
        "GROUP_TYPE": group_type(),
        # The portal keeps its own users' fields; it saves only what it changes (a full save
        # would tell every gateway to reload its keys).
        "ALWAYS_UPDATE_USER": False,
        "USER_ATTR_MAP": {},
    }


@dataclass(frozen=True)
class Person:
    """Someone the directory knows, with their groups' DNs and names (cn)."""

    dn: str
    email: str
    group_dns: frozenset[str]
    group_names: frozenset[str]


@dataclass(frozen=True)
class _Entry:
    """What django-auth-ldap's group types read of a user: dn, attrs and a bound connection."""

    dn: str
    attrs: dict[str, list[str]]
    connection: Any


def person_from(dn: str, attrs: Any, group_dns: Iterable[str], group_names: Iterable[str | None]) -> Person:
    emails = attrs.get("mail") or [""]
    return Person(dn, emails[0], frozenset(group_dns), frozenset(name for name in group_names if name))


@contextmanager
def connection() -> Iterator[Any]:
    """A connection bound with GP_LDAP_BIND_DN (anonymous without one). Raises DirectoryUnavailable."""
    config = library_settings()
    try:
        conn = ldap.initialize(config["SERVER_URI"], bytes_mode=False)
        for option, value in config["CONNECTION_OPTIONS"].items():
            conn.set_option(option, value)
        if config["START_TLS"]:
            conn.start_tls_s()
        conn.simple_bind_s(config["BIND_DN"], config["BIND_PASSWORD"])
    except ldap.LDAPError as exc:
        raise DirectoryUnavailable(describe(exc)) from exc
    try:
        yield conn
    finally:
        conn.unbind_s()


def look_up(conn: Any, username: str) -> Person | None:
    """The directory's entry for `username` with its groups, or None when the user search finds
    no one (or more than one: an ambiguous filter names nobody). Raises DirectoryUnavailable."""
    config = library_settings()
    try:
        found = list(config["USER_SEARCH"].execute(conn, {"user": username}))
        if len(found) != 1:
            return None
        dn, attrs = found[0]
        group_type = config["GROUP_TYPE"]
        infos = list(group_type.user_groups(_Entry(dn, attrs, conn), config["GROUP_SEARCH"]))
    except ldap.LDAPError as exc:
        raise DirectoryUnavailable(describe(exc)) from exc
    names = (group_type.group_name_from_info(info) for info in infos)
    return person_from(dn, attrs, (info[0] for info in infos), names)


def describe(exc: ldap.LDAPError) -> str:
    """python-ldap's error in a line: its kind and the server's or library's words."""
    detail = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
    words = detail.get("desc") or str(exc)
    info = detail.get("info")
    return f"{type(exc).__name__}: {words}" + (f" ({info})" if info else "")
