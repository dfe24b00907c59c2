"""The staff budgets page: every budget and raise with its used and reserved tokens drawn against
its limit beside the part of its period gone by (a usage bar ahead of the time bar will run out
before the reset), a form to set one and a button to remove one. Every change goes through
fairness.actions.budgets, which audits it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from fairness.actions import budgets
from fairness.models import Budget
from fairness.portal.forms import NoColon
from fairness.portal.pages.common import page_actor, staff_required
from fairness.portal.reports.budgets import all_lines, until_words
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class BudgetForm(NoColon, forms.Form):
    # Chosen, not typed: only a holder that exists can be sent (holder_of_choice checks it again).
    holder = forms.ChoiceField(help_text="An account, a user in one of their accounts, or a live key.")
    tokens = forms.IntegerField(label="Tokens", min_value=1, max_value=10**15,
                                help_text="Weighted tokens per period.")
    period = forms.ChoiceField(choices=Budget.Period.choices, initial=Budget.Period.MONTH)
    window_hours = forms.IntegerField(label="Window (hours)", min_value=1, max_value=24 * 366, required=False,
                                      help_text="Only for a rolling window.")
    until = forms.DateField(label="Raise until", required=False, widget=forms.DateInput(attrs={"type": "date"}),
                            help_text="Empty for a standing budget; a date for a raise through that day, "
                                      "replacing the standing budget of the period until then.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        holder = cast(forms.ChoiceField, self.fields["holder"])  # as declared above
        holder.choices = [("", "Choose a holder"), *budgets.holder_choices()]


def _get_budget_for_user(user: User, budget_id: int) -> Budget:
    # Behind staff_required already; repeated so the helper is safe wherever it is called.
    if not (user.is_active and user.is_staff):
        raise Http404
    return get_object_or_404(Budget.objects.select_related("account", "membership__user",
                                                           "membership__account", "key"), pk=budget_id)


def _refused(form: BudgetForm, error: ValidationError) -> None:
    fields = {"holder": "holder", "account": "holder", "tokens": "tokens", "period": "period",
              "window_hours": "window_hours", "until": "until"}
    for field, errors in (error.message_dict.items() if hasattr(error, "error_dict") else [(None, error.messages)]):
        form.add_error(fields.get(field or ""), errors)


def _page(request: SignedInRequest, form: BudgetForm, status: int = 200) -> HttpResponse:
    return render(request, "staff/budgets.html", {"lines": all_lines(), "form": form,
                                                  "periods": Budget.Period.choices}, status=status)


@staff_required
@require_safe
def budgets_page(request: SignedInRequest) -> HttpResponse:
    return _page(request, BudgetForm(auto_id="budget-%s"))


@staff_required
@require_POST
def set_budget(request: SignedInRequest) -> HttpResponse:
    form = BudgetForm(request.POST, auto_id="budget-%s")
    if form.is_valid():
        data = form.cleaned_data
        try:
            holder = budgets.holder_of_choice(data["holder"])
            until = budgets.end_of_day(data["until"]) if data["until"] else None
            budget = budgets.set_budget(page_actor(request), **holder, tokens=data["tokens"], period=data["period"],
                                        window_hours=data["window_hours"], until=until)
        except ValidationError as refused:
            _refused(form, refused)
        else:
            raised = f", raised until {until_words(budget.until)}" if budget.until else ""
            messages.success(request, f"Budget of {budget.holder_name}: {budget.tokens:,} tokens per "
                                      f"{budget.get_period_display()}{raised}.")
            return redirect("staff-budgets")
    return _page(request, form)


@staff_required
@require_POST
def remove_budget(request: SignedInRequest, budget_id: int) -> HttpResponse:
    budget = _get_budget_for_user(request.user, budget_id)
    words = str(budget)
    budgets.remove_budget(page_actor(request), budget)
    messages.success(request, f"Removed the budget of {words}.")
    return redirect("staff-budgets")
