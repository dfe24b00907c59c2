"""The association a key charges when none is named. Not an audited change of the tree (staff's
are accounts.py's): it only names, or makes, a user's own default."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from fairness.models import Account, Membership

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def default_membership(user: User) -> Membership:
    """The association a key charges when none is named: the user's default, or, for a user in
    no account yet, a new account of their own (shares 1, at the top of the tree)."""
    membership = Membership.objects.filter(user=user, is_default=True).select_related("account").first()
    if membership is not None:
        return membership
    with transaction.atomic():
        other = Membership.objects.filter(user=user).order_by("pk").first()
        if other is not None:
            other.is_default = True
            other.save(update_fields=["is_default"])
            return other
        name, n = user.get_username(), 1
        while Account.objects.filter(name=name).exists():
            n += 1
            name = f"{user.get_username()}-{n}"
        account = Account.objects.create(name=name, description=f"{user.get_username()}'s own account")
        return Membership.objects.create(account=account, user=user, is_default=True)
