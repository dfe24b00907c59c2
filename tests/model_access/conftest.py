"""Keys in a small tree (lab, proj under it, other beside it), and a second model to tell apart."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from fairness.actions import accounts
from fairness.actions.audit import Actor
from fairness.actions.keys import issue_key
from fairness.models import Account, ApiKey, Tier

SETUP = Actor(None, name="test-setup")
OTHER_MODEL = "other/model-b"  # a slash, as Hugging Face names go


def key_in(account: Account, tier: Tier, username: str) -> tuple[ApiKey, str]:
    """A key of a new user whose default (and only) account is `account`."""
    user = get_user_model().objects.create_user(username)
    membership = accounts.add_member(SETUP, account, user)
    return issue_key(user, tier, membership=membership)


def restrict(holder: Tier | Account, *models: str) -> None:
    holder.allowed_models = list(models)
    holder.save()  # a save bumps the config epoch, as a staff change does


@pytest.fixture
def lab(tiers) -> Account:
    return accounts.add_account(SETUP, "lab")


@pytest.fixture
def proj(lab) -> Account:
    return accounts.add_account(SETUP, "proj", parent=lab)


@pytest.fixture
def other(tiers) -> Account:
    return accounts.add_account(SETUP, "other")
