import argparse
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from fairness.actions import accounts, lab_managers
from fairness.management.audited import AuditedCommand
from fairness.models import Account


class Command(AuditedCommand):
    help = ("Add a user to an account (or change their shares there). Their keys that name no "
            "account charge their default account.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("account")
        parser.add_argument("user", help="An existing username.")
        parser.add_argument("--shares", type=int, default=None,
                            help="Their part of the account's share, relative to the other members' "
                                 "(1 for a new member; leave out to keep a member's).")
        parser.add_argument("--default", action="store_true",
                            help="Make this their default account (a user's first account is anyway).")
        parser.add_argument("--manager", action=argparse.BooleanOptionalAction, default=None,
                            help="Make them a manager of the account (its members, their keys, the accounts "
                                 "under it, shares and budgets, within what staff gave it); --no-manager: no "
                                 "longer. Leave out to keep it as it is.")

    def handle(self, *args: Any, account: str, user: str, shares: int | None, default: bool,
               manager: bool | None, **options: Any) -> None:
        if shares is not None and not 1 <= shares <= accounts.MAX_SHARES:
            raise CommandError(f"--shares must be a whole number from 1 to {accounts.MAX_SHARES:,}")
        if "\x00" in account + user:
            raise CommandError("No NUL characters, please.")
        found = Account.objects.filter(name=account).first()
        if found is None:
            raise CommandError(f"No account named {account!r}. `manage.py sshare` lists them; "
                               "`manage.py add_account` adds one.")
        member = get_user_model().objects.filter(username=user).first()
        if member is None:
            raise CommandError(f"No user named {user!r}.")
        try:
            membership = accounts.add_member(self.actor(), found, member, default=default, shares=shares)
            if manager is not None:
                lab_managers.set_manager(self.actor(), membership, manager)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        count = membership.shares
        default_note = "; it is their default account" if membership.is_default else ""
        manager_note = "; they manage it" if membership.is_manager else ""
        self.stdout.write(f"{user} is in {account} with {count} {'share' if count == 1 else 'shares'}"
                          f"{default_note}{manager_note}.")
