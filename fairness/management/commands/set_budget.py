import datetime as dt
from typing import Any, cast

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from fairness.actions import budgets
from fairness.management.audited import AuditedCommand
from fairness.models import Budget


class Command(AuditedCommand):
    help = ("Set a token budget (weighted tokens per day, week, month or rolling window) on an account "
            "(its whole subtree), a user's association with an account, or a key; with --until, a raise "
            "that replaces the standing budget through that day; with --remove, remove the budget. "
            "`manage.py budgets` lists them.")

    def add_arguments(self, parser: CommandParser) -> None:
        holder = parser.add_mutually_exclusive_group(required=True)
        holder.add_argument("--account", help="An account: the budget counts its whole subtree.")
        holder.add_argument("--user", help="A user: the budget of their association with --in ACCOUNT.")
        holder.add_argument("--key", help="A key, by its prefix (gp-…).")
        parser.add_argument("--in", dest="in_account", default="",
                            help="With --user: the account (default: their default account).")
        parser.add_argument("--tokens", type=int, default=None, help="Weighted tokens per period.")
        parser.add_argument("--period", choices=budgets.PERIODS, default=None)
        parser.add_argument("--window-hours", type=int, default=None, help="A rolling window's length.")
        parser.add_argument("--until", default=None, metavar="YYYY-MM-DD",
                            help="A raise through that day, replacing the standing budget until then.")
        parser.add_argument("--remove", action="store_true",
                            help="Remove the holder's budget of --period (with --until: its raise).")

    def handle(self, *args: Any, account: str | None, user: str | None, key: str | None, in_account: str,
               tokens: int | None, period: str | None, window_hours: int | None, until: str | None, remove: bool,
               **options: Any) -> None:
        if in_account and not user:
            raise CommandError("--in goes with --user: the account of the user's association.")
        if period is None:
            raise CommandError(f"--period is needed: one of {', '.join(budgets.PERIODS)}.")
        kind, name = ("account", account) if account else ("user", user) if user else ("key", key)
        try:
            holder = budgets.holder_of(kind, cast(str, name), in_account)  # the required group gives one
        except ValidationError as exc:
            raise CommandError(_messages(exc, {"holder": f"--{kind}", "account": "--in"})) from None
        ends = _date(until)
        if remove:
            return self._remove(holder, period, ends is not None)
        if tokens is None:
            raise CommandError("--tokens is needed: weighted tokens per period.")
        try:
            budget = budgets.set_budget(self.actor(), **holder, tokens=tokens, period=period,
                                        window_hours=window_hours, until=budgets.end_of_day(ends) if ends else None)
        except ValidationError as exc:
            raise CommandError(_messages(exc, OPTIONS)) from None
        raised = f" until {budget.until:%Y-%m-%d %H:%M %Z}" if budget.until else ""
        self.stdout.write(f"Budget of {budget.holder_name}: {budget.tokens:,} tokens per "
                          f"{budget.get_period_display()}{raised}.")
        return None

    def _remove(self, holder: budgets.Holder, period: str, raised: bool) -> None:
        found = Budget.objects.filter(**holder, period=period)
        found = found.filter(until__gt=timezone.now()) if raised else found.filter(until=None)
        budget = found.first()
        if budget is None:
            what = "live raise" if raised else "standing budget"
            raise CommandError(f"{next(iter(holder.values()))} has no {what} per {period}.")
        budgets.remove_budget(self.actor(), budget)
        self.stdout.write(f"Removed the budget of {budget.holder_name} per {budget.get_period_display()}.")


OPTIONS = {"tokens": "--tokens", "period": "--period", "window_hours": "--window-hours", "until": "--until",
           "holder": "holder"}


def _date(text: str | None) -> dt.date | None:
    if text is None:
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--until: {text!r} is not a date like 2025-12-21.") from None


def _messages(exc: ValidationError, options: dict[str, str]) -> str:
    if hasattr(exc, "error_dict"):
        return "; ".join(f"{options.get(field, field)}: {' '.join(m)}" for field, m in exc.message_dict.items())
    return " ".join(exc.messages)
