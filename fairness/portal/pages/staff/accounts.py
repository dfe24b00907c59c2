"""Staff pages for the fair-share tree: accounts and their members with each one's share, its
part of recent usage and its factor F (fair_share_report.rows, sshare's table); adding an
account, changing one's shares, adding a member. Every change goes through
fairness.actions.accounts, which audits it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.forms import Form
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_safe

from fairness.actions import accounts as account_actions
from fairness.actions import lab_managers
from fairness.models import Account, Membership
from fairness.portal.forms import AccountForm, AccountSharesForm, MemberForm
from fairness.portal.pages.common import page_actor, staff_required
from fairness.portal.reports.budgets import all_lines
from fairness.portal.reports.fair_share import Row, rows
from fairness.portal.reports.fair_share_words import half_life_in_words
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class Line:
    """One row of the tree as the page draws it."""

    row: Row
    under: str  # the account it sits in ("" at the top)
    share: str  # S and U as the page prints them, and as the bars' widths (CSS percentages)
    usage: str
    share_width: str
    usage_width: str

    @property
    def is_member(self) -> bool:
        return bool(self.row.user)

    @property
    def indent(self) -> str:
        return f"{0.6 + 1.25 * self.row.depth:.2f}rem"


def as_percent(fraction: float) -> str:
    """0.3333 -> "33.3%"; a sliver that would print as 0.0% says it is more than nothing."""
    if fraction <= 0:
        return "0%"
    if fraction < 0.0005:
        return "< 0.1%"
    return f"{100 * fraction:.1f}%"


def tree_lines(table: list[Row]) -> list[Line]:
    """The rows come depth first, so the account a row sits in is the last account row above it
    one level up."""
    path: list[str] = []  # the account at each depth on the way down to the current row
    out = []
    for row in table:
        if row.user:
            under = row.account
        else:
            del path[row.depth:]
            under = path[-1] if path else ""
            path.append(row.account)
        out.append(Line(
            row, under, as_percent(row.norm_shares), as_percent(row.effective_usage),
            f"{100 * min(1.0, row.norm_shares):.2f}%", f"{100 * min(1.0, row.effective_usage):.2f}%",
        ))
    return out


def _get_account_for_user(user: User, name: str) -> Account:
    # Behind staff_required already; repeated so the helper is safe wherever it is called.
    if not (user.is_active and user.is_staff):
        raise Http404
    return get_object_or_404(Account, name=name)


def _refused(form: Form, error: ValidationError) -> None:
    """The actions validate again (the model's rules, their own bounds): their word lands on the
    form, on its field where it names one of the form's."""
    if hasattr(error, "error_dict"):
        for field, errors in error.error_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, error)


def _form_page(request: SignedInRequest, form: Form, title: str, lede: str, button: str) -> HttpResponse:
    return render(request, "staff/account_form.html", {"form": form, "title": title, "lede": lede, "button": button})


@staff_required
@require_safe
def accounts(request: SignedInRequest) -> HttpResponse:
    return render(request, "staff/accounts.html", {
        "lines": tree_lines(rows()),
        "managers": {f"{account}/{user}" for account, user in Membership.objects.filter(is_manager=True)
                     .values_list("account__name", "user__username")},
        # Two forms on one page: their fields' ids apart (both have "shares").
        "account_form": AccountForm(auto_id="account-%s"),
        "member_form": MemberForm(auto_id="member-%s"),
        "half_life": half_life_in_words(),
        "budget_lines": [line for line in all_lines() if line.in_force and line.holder_kind != "key"],
    })


@staff_required
def add_account(request: SignedInRequest) -> HttpResponse:
    form = AccountForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            account = account_actions.add_account(page_actor(request), data["name"], data["parent"], data["shares"],
                                                  data["description"], data["allowed_models"])
        except ValidationError as refused:
            _refused(form, refused)
        else:
            where = f"under {account.parent}" if account.parent else "at the top of the tree"
            messages.success(request, f"Added account {account} {where}, with {account.shares} share(s).")
            return redirect("staff-accounts")
    return _form_page(request, form, "Add an account",
                      "A new account starts with no members and no usage.", "Add account")


@staff_required
def change_shares(request: SignedInRequest, name: str) -> HttpResponse:
    """Also the models the account allows."""
    account = _get_account_for_user(request.user, name)
    form = AccountSharesForm(request.POST or None,
                             initial={"shares": account.shares, "allowed_models": account.allowed_models})
    if request.method == "POST" and form.is_valid():
        before = account.shares
        try:
            account_actions.change_account(page_actor(request), account, shares=form.cleaned_data["shares"],
                                           allowed_models=form.cleaned_data["allowed_models"])
        except ValidationError as refused:
            _refused(form, refused)
        else:
            allowed = ", ".join(account.allowed_models) or "every model"
            messages.success(request, f"Shares of {account}: {before} → {account.shares}; models: {allowed}. "
                                      "Queues and keys follow at once.")
            return redirect("staff-accounts")
    return _form_page(request, form, f"Shares and models of {account}",
                      "Shares are relative: what counts is an account's shares over its siblings'.",
                      "Save")


@staff_required
def add_member(request: SignedInRequest) -> HttpResponse:
    """Also changes the shares of someone already in the account (the tree's member rows link
    here with the form filled in)."""
    initial: dict[str, object] = {name: request.GET[name] for name in ("user", "account", "shares")
                                  if request.GET.get(name)}
    initial["manager"] = Membership.objects.filter(user__username=initial.get("user", ""),
                                                   account__name=initial.get("account", ""), is_manager=True).exists()
    form = MemberForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            membership = account_actions.add_member(page_actor(request), data["account"], data["user"],
                                                    default=data["default"], shares=data["shares"])
            lab_managers.set_manager(page_actor(request), membership, data["manager"])
        except ValidationError as refused:
            _refused(form, refused)
        else:
            default = " It is their default account." if membership.is_default else ""
            messages.success(request, f"{membership.user} is in {membership.account} with "
                                      f"{membership.shares} share(s).{default}")
            return redirect("staff-accounts")
    return _form_page(request, form, "Add a member",
                      "Adding someone already in the account changes their shares there.", "Add member")
