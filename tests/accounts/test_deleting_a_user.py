"""Deleting a user (the Django admin can) takes their keys and memberships with them; the
accounts stay, since other members may share them."""

import pytest
from django.contrib.auth import get_user_model

from fairness.actions.keys import issue_key
from fairness.models import Account, ApiKey, Membership, Tier


@pytest.mark.django_db
def test_deleting_a_user_takes_their_keys_and_memberships_not_the_accounts():
    user = get_user_model().objects.create(username="leaver")
    key, _ = issue_key(user, Tier.objects.create(name="tt"))
    account = key.membership.account
    user.delete()
    assert not ApiKey.objects.filter(pk=key.pk).exists()
    assert not Membership.objects.filter(account=account).exists()
    assert Account.objects.filter(pk=account.pk).exists()
