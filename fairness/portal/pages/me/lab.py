"""A lab manager's pages, /me/lab/: the accounts they manage, and for each its members, keys,
sub-accounts and budgets, with the forms to change them. actions/lab_managers.py decides what a
manager may do; an account they do not manage is a 404 here, exactly like one that does not exist.

Each form posts to the account's page with an `op` naming what it does; a refusal comes back as
a message on the page, every change as a line in the audit log."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.debug import sensitive_variables

from fairness.actions import lab_managers, self_service
from fairness.models import Account, ApiKey, Budget, Membership
from fairness.portal import submit_once
from fairness.portal.lab_forms import AddMemberForm, LabBudgetForm, LabKeyForm, SharesForm, SubAccountForm
from fairness.portal.pages.common import already_done, page_actor, secret_page
from fairness.portal.reports.lab import lab_view
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _get_account_for_manager(user: User, name: str) -> Account:
    """Only an account they manage; any other is not found."""
    for account in lab_managers.managed(user):
        if account.name == name:
            return account
    raise Http404("No such account.")


def _budget_holders(account: Account) -> list[tuple[str, str]]:
    """What a manager may put a budget on here: the account's members and its sub-accounts."""
    members = Membership.objects.filter(account=account).select_related("user").order_by("user__username")
    return ([(f"m{m.pk}", f"{m.user.get_username()} in {account.name}") for m in members]
            + [(f"a{a.pk}", f"sub-account {a.name}") for a in Account.objects.filter(parent=account)])


def _holder(account: Account, value: str) -> Account | Membership:
    """"m12": a member's association here; "a7": a sub-account (the form offers only those)."""
    kind, pk = value[:1], _pk(value[1:])
    if kind == "m":
        return get_object_or_404(Membership.objects.select_related("user"), pk=pk, account=account)
    return get_object_or_404(Account, pk=pk, parent=account)


@login_required
def labs(request: SignedInRequest) -> HttpResponse:
    accounts = lab_managers.managed(request.user)
    if not accounts:
        raise Http404("You manage no account.")
    return render(request, "me/labs.html", {"accounts": accounts,
                                            "given": {a.pk for a in lab_managers.given_accounts(request.user)}})


@login_required
@sensitive_variables("secret")
def lab(request: SignedInRequest, name: str) -> HttpResponse:
    account = _get_account_for_manager(request.user, name)
    given = account.pk in {a.pk for a in lab_managers.given_accounts(request.user)}
    key_form = LabKeyForm(request.POST if request.POST.get("op") == "issue_key" else None, account=account)
    budget_form = LabBudgetForm(request.POST if request.POST.get("op") == "budget" else None,
                                holders=_budget_holders(account))
    member_form = AddMemberForm(request.POST if request.POST.get("op") == "add_member" else None)
    sub_form = SubAccountForm(request.POST if request.POST.get("op") == "add_sub_account" else None)
    status = 200
    if request.method == "POST":
        op = request.POST.get("op", "")
        if op == "issue_key":
            return _issue_key(request, account, key_form, given)
        forms_by_op: dict[str, forms.Form] = {"budget": budget_form, "add_member": member_form,
                                              "add_sub_account": sub_form}
        try:
            done = _apply(request, account, op, forms_by_op.get(op))
        except (PermissionDenied, ValidationError, self_service.Refused) as refused:
            words = "; ".join(refused.messages) if isinstance(refused, ValidationError) else str(refused)
            messages.error(request, words)
            done = False
        if done:
            return redirect(reverse("me-lab", args=[account.name]))
        status = 400
    return render(request, "me/lab.html", {
        "view": lab_view(account, given), "key_form": key_form, "budget_form": budget_form,
        "member_form": member_form, "sub_form": sub_form,
    }, status=status)


def _apply(request: SignedInRequest, account: Account, op: str, form: forms.Form | None) -> bool:
    """Do what the form posted asks; True when done (a message says what), False when its form
    has errors to show."""
    actor = page_actor(request)
    if form is not None and not form.is_valid():
        return False
    data = form.cleaned_data if form is not None else {}
    target = request.POST.get("target", "")
    ops: dict[str, Callable[[], str]] = {
        "add_member": lambda: (lab_managers.add_member(actor, account, data["username"], data["shares"]),
                               f"{data['username']} is a member of {account.name}.")[1],
        "add_sub_account": lambda: (lab_managers.add_sub_account(actor, account, data["name"], data["shares"]),
                                    f"{data['name']} is a sub-account of {account.name}.")[1],
        "budget": lambda: _set_budget(request, account, data),
        "remove_member": lambda: _remove_member(request, account, target),
        "member_shares": lambda: _shares(request, account, target, member=True),
        "sub_account_shares": lambda: _shares(request, account, target, member=False),
        "remove_budget": lambda: _remove_budget(request, account, target),
        "revoke_key": lambda: _revoke(request, account, target),
    }
    if op not in ops:
        raise ValidationError("That is not something this page does.")
    messages.success(request, ops[op]())
    return True


def _member(account: Account, target: str) -> Membership:
    return get_object_or_404(Membership.objects.select_related("user", "account"), pk=_pk(target), account=account)


def _pk(target: str) -> int:
    if not target.isdigit():
        raise Http404("No such thing here.")
    return int(target)


def _remove_member(request: SignedInRequest, account: Account, target: str) -> str:
    membership = _member(account, target)
    lab_managers.remove_member(page_actor(request), membership)
    return f"{membership.user.get_username()} is no longer a member of {account.name}."


def _shares(request: SignedInRequest, account: Account, target: str, *, member: bool) -> str:
    form = SharesForm(request.POST)
    if not form.is_valid():
        raise ValidationError(list(form.errors["shares"]))
    shares = form.cleaned_data["shares"]
    if member:
        membership = _member(account, target)
        lab_managers.set_member_shares(page_actor(request), membership, shares)
        return f"{membership.user.get_username()} now has {shares} shares in {account.name}."
    child = get_object_or_404(Account, pk=_pk(target), parent=account)
    lab_managers.set_sub_account_shares(page_actor(request), child, shares)
    return f"{child.name} now has {shares} shares among its siblings."


def _set_budget(request: SignedInRequest, account: Account, data: dict[str, object]) -> str:
    holder = _holder(account, str(data["holder"]))
    tokens, period = int(str(data["tokens"])), str(data["period"])
    lab_managers.set_budget(page_actor(request), holder, tokens, period)
    name = holder.name if isinstance(holder, Account) else f"{holder.user.get_username()} in {account.name}"
    return f"{name} may use {tokens:,} weighted tokens a {period}."


def _remove_budget(request: SignedInRequest, account: Account, target: str) -> str:
    budget = get_object_or_404(Budget.objects.select_related("account", "membership__account"), pk=_pk(target))
    lab_managers.remove_budget(page_actor(request), budget)
    return f"Removed the budget of {budget.holder_name}."


def _revoke(request: SignedInRequest, account: Account, target: str) -> str:
    key = get_object_or_404(ApiKey.objects.select_related("membership__account", "owner"), prefix=target,
                            membership__account=account)
    lab_managers.revoke_key(page_actor(request), key)
    return f"Revoked {key.prefix}… of {key.owner.get_username()}. Every gateway refuses it within a second."


def _issue_key(request: SignedInRequest, account: Account, form: LabKeyForm, given: bool) -> HttpResponse:
    if form.is_valid():
        data = form.cleaned_data
        try:
            with submit_once.first_submission(data["once"]) as record:
                key, secret = lab_managers.issue_key(page_actor(request), data["member"], data["label"],
                                                     data.get("expires_days"))
                record(key.prefix)
        except submit_once.Repeated as repeated:
            return already_done(request, repeated.outcome, "key", "revoke it and issue another", "me-labs")
        except (PermissionDenied, self_service.Refused, ValidationError) as refused:
            form.add_error(None, "; ".join(refused.messages) if isinstance(refused, ValidationError) else str(refused))
        else:
            return secret_page(request, "staff/key_secret.html", key=key, secret=secret, rotated=None,
                               back=reverse("me-lab", args=[account.name]), back_text=f"Back to {account.name}")
    return render(request, "me/lab.html", {
        "view": lab_view(account, given), "key_form": form,
        "budget_form": LabBudgetForm(holders=_budget_holders(account)),
        "member_form": AddMemberForm(), "sub_form": SubAccountForm(),
    }, status=400)
