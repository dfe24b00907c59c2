"""GP_LDAP_* at start-up: the backend and the sync join only with a server set, the bind password
may come from a file, and a half configuration stops the start with a message that names it."""

from __future__ import annotations

import pytest

from tests.support.settings_process import load_settings

BASES = {"GP_LDAP_USER_SEARCH_BASE": "ou=people,dc=uni,dc=example",
         "GP_LDAP_GROUP_SEARCH_BASE": "ou=groups,dc=uni,dc=example"}
SECRET = {"SECRET_KEY": "x" * 50}


def test_without_a_server_neither_the_backend_nor_the_sync_runs():
    child = load_settings("(settings.AUTHENTICATION_BACKENDS, 'sync-ldap-users' in settings.CELERY_BEAT_SCHEDULE)",
                          **SECRET)
    assert child.stdout.strip() == "(['django.contrib.auth.backends.ModelBackend'], False)", child.stderr


def test_a_server_adds_the_backend_and_the_sync_and_the_bind_password_comes_from_a_file(tmp_path):
    secret = tmp_path / "bind"
    secret.write_text("from-a-file\n")
    child = load_settings(
        "(settings.AUTHENTICATION_BACKENDS[-1], settings.GP_LDAP_BIND_PASSWORD, "
        "settings.CELERY_BEAT_SCHEDULE['sync-ldap-users']['schedule'])",
        GP_LDAP_SERVER_URI="ldap://ldap.uni.invalid", GP_LDAP_BIND_DN="cn=portal,dc=uni,dc=example",
        GP_LDAP_BIND_PASSWORD_FILE=str(secret), GP_LDAP_SYNC_SECONDS="600", **BASES, **SECRET)
    assert child.stdout.strip() == "('fairness.portal.signin.ldap_backend.DirectoryBackend', 'from-a-file', 600.0)", \
        child.stderr


@pytest.mark.parametrize(("env", "message"), [
    ({"GP_LDAP_SERVER_URI": "ldap.uni.invalid", **BASES}, "use ldap://host[:port]"),
    ({"GP_LDAP_SERVER_URI": "ldap://ldap.uni.invalid", "GP_LDAP_GROUP_SEARCH_BASE": "ou=groups"},
     "GP_LDAP_USER_SEARCH_BASE is not"),
    ({"GP_LDAP_SERVER_URI": "ldap://ldap.uni.invalid", "GP_LDAP_USER_SEARCH_BASE": "ou=people"},
     "GP_LDAP_GROUP_SEARCH_BASE is not"),
    ({"GP_LDAP_SERVER_URI": "ldap://ldap.uni.invalid", "GP_LDAP_USER_FILTER": "(uid=alice)", **BASES},
     "must contain %(user)s"),
    ({"GP_LDAP_SERVER_URI": "ldap://ldap.uni.invalid", "GP_LDAP_BIND_PASSWORD": "x", **BASES},
     "GP_LDAP_BIND_DN is not"),
    ({"GP_LDAP_SERVER_URI": "ldaps://ldap.uni.invalid", "GP_LDAP_START_TLS": "true", **BASES},
     "ldaps:// is encrypted already"),
    ({"GP_LDAP_GROUP_TYPE": "groupOfUniqueNames"}, "use groupOfNames or posixGroup"),
    ({"GP_LDAP_TIMEOUT_SECONDS": "0"}, "must be more than 0"),
])
def test_a_half_configuration_stops_the_start_with_a_message(env: dict[str, str], message: str):
    child = load_settings("settings.GP_LDAP_SERVER_URI", **env, **SECRET)
    assert child.returncode != 0 and "ImproperlyConfigured" in child.stderr
    assert message in child.stderr
