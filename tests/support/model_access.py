"""Model restrictions: keys of new users in an account, restricting a tier or an account to some
models, and a second model to tell apart from the session's."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from fairness.actions import accounts
from fairness.actions.keys import issue_key
from fairness.models import Account, ApiKey, Tier
from tests.support.audit import SETUP

OTHER_MODEL = "other/model-b"  # a slash, as Hugging Face names go


def key_in(account: Account, tier: Tier, username: str) -> tuple[ApiKey, str]:
    """A key of a new user whose default (and only) account is `account`."""
    user = get_user_model().objects.create_user(username)
    membership = accounts.add_member(SETUP, account, user)
    return issue_key(user, tier, membership=membership)


def restrict(holder: Tier | Account, *models: str) -> None:
    holder.allowed_models = list(models)
    holder.save()  # a save bumps the config epoch, as a staff change does
