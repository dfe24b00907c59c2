"""The periodic sync against a real slapd (ldap_sync): people gone from the directory are
deactivated, everyone else's memberships follow their groups, and a directory that cannot be
searched changes nothing."""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings

from fairness.actions.keys import issue
from fairness.actions.users import set_user_active
from fairness.models import AuditEntry, Membership
from fairness.portal.signin import ldap_sync
from fairness.portal.signin.ldap_sync import sync_directory
from tests.ldap.test_password_signin import memberships, sign_in
from tests.support.audit import SETUP
from tests.support.ldap import PASSWORDS, Labs, Slapd, ldap_environment, needs_slapd, user_dn
from tests.support.polling import wait_for

pytestmark = needs_slapd
User = get_user_model()


@pytest.fixture
def signed_in(slapd: Slapd, labs: Labs, redis_url) -> list[str]:
    """alice and bob have signed in once (so the directory made their accounts); sam is local."""
    for name in ("alice", "bob"):
        assert sign_in(name, PASSWORDS[name])[1].status_code == 302
    User.objects.create_user("sam", password="a long staff password", is_staff=True)
    return ["alice", "bob"]


def active(username: str) -> bool:
    return User.objects.get(username=username).is_active


def test_someone_deleted_from_the_directory_is_deactivated_and_their_keys_stop(slapd: Slapd, signed_in, labs: Labs):
    key, _ = issue(SETUP, User.objects.get(username="alice"), labs.standard)
    slapd.delete(user_dn("alice"))

    report = sync_directory()

    assert (report.checked, report.gone, report.changed_nothing) == (2, ["alice"], "")
    assert not active("alice") and active("bob") and active("sam")  # sam is not the directory's
    assert AuditEntry.objects.filter(action="user.deactivate", target="alice", actor_name="ldap").exists()
    assert key.owner.pk == User.objects.get(username="alice").pk  # kept, but its owner is off: 401 owner_inactive
    assert memberships("alice") == {"nlp": True}  # kept for a return


def test_everyone_still_there_has_their_groups_followed_and_a_return_reactivates(slapd: Slapd, signed_in):
    slapd.remove_member("vision-lab", "bob")
    slapd.remove_member("nlp-lab", "alice")

    report = sync_directory()

    assert report.gone == [] and report.without_access == ["alice"]
    assert memberships("bob") == {"nlp": True}
    assert not active("alice")

    slapd.reset()  # alice back in nlp-lab
    sync_directory()
    assert active("alice")
    assert list(AuditEntry.objects.filter(target="alice", action__startswith="user.").values_list(
        "action", "actor_name").order_by("pk")) == [("user.create", "ldap"), ("user.deactivate", "ldap"),
                                                    ("user.reactivate", "ldap")]


def test_a_staff_deactivation_stands(slapd: Slapd, signed_in):
    set_user_active(SETUP, User.objects.get(username="bob"), False)
    sync_directory()
    assert not active("bob")


def test_a_directory_that_cannot_be_reached_changes_nothing(slapd: Slapd, signed_in, unreachable: str, caplog):
    slapd.remove_member("nlp-lab", "alice")
    before = AuditEntry.objects.count()

    with override_settings(GP_LDAP_SERVER_URI=unreachable), caplog.at_level(logging.WARNING):
        report = sync_directory()

    assert "could not be searched" in report.changed_nothing and "SERVER_DOWN" in report.changed_nothing
    assert "LDAP sync changed nothing" in caplog.text
    assert active("alice") and active("bob") and AuditEntry.objects.count() == before


@pytest.mark.parametrize("wrong", [{"GP_LDAP_BIND_PASSWORD": "not-the-bind-password"},
                                   {"GP_LDAP_USER_SEARCH_BASE": "ou=nowhere,dc=uni,dc=example"}])
def test_a_failed_bind_or_search_changes_nothing(slapd: Slapd, signed_in, wrong: dict[str, str]):
    before = Membership.objects.count(), AuditEntry.objects.count()
    with override_settings(**wrong):
        report = sync_directory()
    assert report.changed_nothing
    assert active("alice") and active("bob") and (Membership.objects.count(), AuditEntry.objects.count()) == before


def test_a_directory_that_knows_none_of_them_is_taken_as_misconfigured(slapd: Slapd, signed_in):
    with override_settings(GP_LDAP_USER_FILTER="(&(uid=%(user)s)(objectClass=posixAccount))"):
        report = sync_directory()
    assert "knows none of the 2 accounts" in report.changed_nothing
    assert active("alice") and active("bob")


def test_the_celery_task_runs_the_sync(slapd: Slapd, signed_in):
    slapd.delete(user_dn("bob"))
    assert ldap_sync.sync_ldap_users() == {"checked": 2, "gone": ["bob"], "without_access": [], "changed_nothing": ""}


@pytest.fixture
def ldap_worker_environment(slapd: Slapd, monkeypatch) -> None:
    """The worker (tests/conftest.py) inherits this process's environment: the directory, and a
    beat that syncs every half second."""
    for name, value in ldap_environment(slapd.uri).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GP_LDAP_SYNC_SECONDS", "0.5")


def test_celery_beat_deactivates_someone_gone_from_the_directory(ldap_worker_environment, signed_in, worker,
                                                                 slapd: Slapd):
    slapd.delete(user_dn("alice"))
    wait_for(lambda: not active("alice"), timeout=30, what="the worker's sync to deactivate alice")
    assert active("bob")


def test_the_session_of_someone_the_sync_deactivated_ends_at_its_next_request(slapd: Slapd, labs: Labs, redis_url):
    client, _ = sign_in("alice", PASSWORDS["alice"])
    assert client.get("/me/").status_code == 200
    slapd.delete(user_dn("alice"))
    sync_directory()
    assert client.get("/me/")["Location"].startswith("/accounts/login/")
