"""The forms of a lab manager's page (pages/me/lab.py). What a manager may do is
actions/lab_managers.py's to decide; these only read the fields."""

from __future__ import annotations

from typing import Any

from django import forms

from fairness.actions.accounts import MAX_SHARES
from fairness.models import Account, Budget, Membership, account_name_validator
from fairness.portal.forms import NoColon, SubmitOnceForm


def _shares(label: str = "Shares") -> forms.IntegerField:
    return forms.IntegerField(label=label, min_value=1, max_value=MAX_SHARES, initial=1)


class AddMemberForm(NoColon, forms.Form):
    username = forms.CharField(label="Username", max_length=150,
                               help_text="Someone who already signs in here; staff add new people.")
    shares = _shares()


class SharesForm(NoColon, forms.Form):
    shares = _shares()


class SubAccountForm(NoColon, forms.Form):
    name = forms.CharField(label="Name", max_length=100, validators=[account_name_validator])
    shares = _shares("Shares among its siblings")


class _MemberChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    def label_from_instance(self, obj: Any) -> str:
        return str(obj.user.get_username())


class LabKeyForm(SubmitOnceForm):
    member = _MemberChoiceField(queryset=Membership.objects.none(), label="For")
    label = forms.CharField(max_length=100, required=False, help_text="What it is for, e.g. “nightly eval”.")
    expires_days = forms.IntegerField(label="Expires after (days)", min_value=1, max_value=3650, required=False,
                                      help_text="Leave empty for a key that does not expire (where the tier allows).")

    def __init__(self, *args: Any, account: Account, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        member = self.fields["member"]
        assert isinstance(member, forms.ModelChoiceField)
        member.queryset = Membership.objects.filter(account=account, user__is_active=True).select_related("user")


class LabBudgetForm(NoColon, forms.Form):
    holder = forms.ChoiceField(label="Holder")
    tokens = forms.IntegerField(label="Weighted tokens", min_value=1)
    period = forms.ChoiceField(label="Per", choices=[(p, label) for p, label in Budget.Period.choices
                                                     if p != Budget.Period.ROLLING])

    def __init__(self, *args: Any, holders: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        holder = self.fields["holder"]
        assert isinstance(holder, forms.ChoiceField)
        holder.choices = holders
