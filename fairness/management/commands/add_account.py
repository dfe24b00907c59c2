from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from fairness.actions import accounts
from fairness.management.audited import AuditedCommand
from fairness.models import Account


class Command(AuditedCommand):
    help = ("Add an account to the fair-share tree (a lab, a project under it), or with --update "
            "change an existing one's shares, parent or models. `manage.py sshare` shows the tree.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Letters, digits and . @ + - _ only.")
        parser.add_argument("--parent", default=None, help="The account it sits under; leave out for the top.")
        parser.add_argument("--top", action="store_true", help="With --update: move it to the top of the tree.")
        parser.add_argument("--shares", type=int, default=None,
                            help="Its part of the parent's share, relative to its siblings' (default 1).")
        parser.add_argument("--description", default="")
        parser.add_argument("--models", default=None,
                            help="The models its members' keys (and those of accounts under it) may use, "
                                 "comma-separated; \"\" for every model (the default).")
        parser.add_argument("--update", action="store_true",
                            help="Change the account named, which must exist, instead of adding one.")

    def handle(self, *args: Any, name: str, parent: str | None, top: bool, shares: int | None, description: str,
               update: bool, models: str | None, **options: Any) -> None:
        if shares is not None and not 1 <= shares <= accounts.MAX_SHARES:
            raise CommandError(f"--shares must be a whole number from 1 to {accounts.MAX_SHARES:,}")
        if "\x00" in name + description + (parent or "") + (models or ""):
            raise CommandError("No NUL characters, please.")
        if top and parent is not None:
            raise CommandError("--top and --parent contradict each other: give one.")
        above = self._account(parent, "--parent") if parent is not None else None
        existing = Account.objects.filter(name=name).first()
        allowed = None if models is None else list(dict.fromkeys(models.replace(",", " ").split()))
        try:
            if update:
                self._change(existing, name, above, shares, top, description, allowed)
            else:
                self._add(existing, name, above, shares, description, allowed)
        except ValidationError as exc:
            raise CommandError(_messages(exc)) from None

    def _add(self, existing: Account | None, name: str, parent: Account | None, shares: int | None, description: str,
             allowed: list[str] | None) -> None:
        if existing is not None:
            raise CommandError(f"An account named {name!r} exists already. Add --update to change its shares "
                               "or parent.")
        account = accounts.add_account(self.actor(), name, parent, shares or 1, description, allowed)
        self.stdout.write(f"Added account {account.name} {_where(account)} with {_shares(account.shares)}"
                          f"{_models(account)}.")

    def _change(self, account: Account | None, name: str, parent: Account | None, shares: int | None, top: bool,
                description: str, allowed: list[str] | None) -> None:
        if account is None:
            raise CommandError(f"No account named {name!r}; leave out --update to add it.")
        if description:
            raise CommandError("--description is for a new account; edit it in the Django admin.")
        move = top or parent is not None
        if shares is None and not move and allowed is None:
            raise CommandError("Nothing to change: give --shares, --parent, --top or --models.")
        account = accounts.change_account(self.actor(), account, shares=shares, parent=parent, move=move,
                                          allowed_models=allowed)
        self.stdout.write(f"Account {account.name} is {_where(account)} with {_shares(account.shares)}"
                          f"{_models(account)}.")

    def _account(self, name: str, option: str) -> Account:
        account = Account.objects.filter(name=name).first()
        if account is None:
            raise CommandError(f"{option}: no account named {name!r}. `manage.py sshare` lists them.")
        return account


def _where(account: Account) -> str:
    return f"under {account.parent.name}" if account.parent else "at the top"


def _shares(shares: int) -> str:
    return f"{shares} {'share' if shares == 1 else 'shares'}"


def _models(account: Account) -> str:
    return f", allowing only {', '.join(account.allowed_models)}" if account.allowed_models else ""


def _messages(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        return "; ".join(f"{field}: {' '.join(m)}" for field, m in exc.message_dict.items())
    return " ".join(exc.messages)
