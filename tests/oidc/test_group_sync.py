"""Memberships follow the identity provider's groups (group_sync), as every sign-in applies them."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fairness.actions import accounts
from fairness.actions.keys import issue
from fairness.actions.users import set_user_active
from fairness.models import ApiKey, AuditEntry, Membership
from fairness.portal.signin import group_sync
from tests.support.audit import SETUP
from tests.support.oidc import Labs

User = get_user_model()
SYNC = group_sync.sync_actor("oidc")


@pytest.fixture
def alice(labs: Labs):
    return User.objects.create_user("alice")


def member_of(user) -> dict[str, bool]:
    return {m.account.name: m.is_default for m in Membership.objects.filter(user=user).select_related("account")}


def test_moving_to_another_group_moves_membership_default_and_keys(alice, labs: Labs):
    group_sync.sync_memberships(SYNC, alice, ["nlp-lab"])
    accounts.add_member(SETUP, labs.shared, alice)  # staff's, in an account no group maps to
    key, _ = issue(SETUP, alice, labs.standard)
    assert key.membership is not None and key.membership.account == labs.nlp

    synced = group_sync.sync_memberships(SYNC, alice, ["vision-lab"])

    assert (synced.added, synced.removed) == (["vision"], ["nlp"])
    assert member_of(alice) == {"vision": True, "shared": False}
    assert ApiKey.objects.get(pk=key.pk).membership.account == labs.vision
    removal = AuditEntry.objects.get(action="account.remove_member")
    assert removal.actor_name == "oidc" and removal.detail["keys_moved"] == [key.prefix]


def test_the_first_mapped_group_is_the_default_and_a_second_sync_changes_nothing(alice, labs: Labs):
    group_sync.sync_memberships(SYNC, alice, ["vision-lab", "nlp-lab", "unmapped"])
    assert member_of(alice) == {"nlp": True, "vision": False}
    before = AuditEntry.objects.count()
    assert group_sync.sync_memberships(SYNC, alice, ["nlp-lab", "vision-lab"]).added == []
    assert AuditEntry.objects.count() == before


def test_no_mapped_group_keeps_memberships_and_staffs_deactivation_stands(alice, labs: Labs):
    group_sync.sync_memberships(SYNC, alice, ["nlp-lab"])
    assert not group_sync.sync_memberships(SYNC, alice, ["unmapped"]).has_access
    assert member_of(alice) == {"nlp": True}

    set_user_active(SETUP, alice, False)  # staff's decision, not the sync's
    group_sync.restore_access(SYNC, alice)
    assert not User.objects.get(pk=alice.pk).is_active


def test_staff_in_no_mapped_group_are_not_deactivated(labs: Labs):
    sam = User.objects.create_user("sam", is_staff=True)
    group_sync.withdraw_access(SYNC, sam)
    assert User.objects.get(pk=sam.pk).is_active
