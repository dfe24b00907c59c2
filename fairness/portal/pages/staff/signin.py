"""Staff page for sign-in with the institution's account: which identity-provider group gives
which account and tier (GroupMapping). Every change goes through group_sync, which audits it;
people's memberships follow at their next sign-in."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from fairness.models import Account, GroupMapping, Tier
from fairness.portal.pages.common import page_actor, staff_required
from fairness.portal.signed_in import SignedInRequest
from fairness.portal.signin import group_sync


class MappingForm(forms.Form):
    group = forms.CharField(max_length=300, label="Group",
                            help_text="As the provider's groups claim writes it, e.g. nlp-lab or /labs/nlp (Keycloak) "
                                      "or a group's object ID (Entra ID).")
    account = forms.ModelChoiceField(Account.objects.order_by("name"), label="Account")
    tier = forms.ModelChoiceField(Tier.objects.order_by("name"), label="Tier",
                                  help_text="For the keys its members make themselves.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


@staff_required
def sign_in(request: SignedInRequest) -> HttpResponse:
    form = MappingForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            mapping = group_sync.add_mapping(page_actor(request), data["group"], data["account"], data["tier"])
        except ValidationError as refused:
            for field, errors in refused.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, f"Members of {mapping.group} join {mapping.account} at their next sign-in.")
            return redirect("staff-sign-in")
    mappings = GroupMapping.objects.select_related("account", "tier")
    return render(request, "staff/sign_in.html", {
        "form": form, "mappings": mappings, "issuer": settings.GP_OIDC_ISSUER,
        "groups_claim": settings.GP_OIDC_GROUPS_CLAIM, "local_signin": settings.GP_LOCAL_SIGNIN,
    }, status=400 if form.errors else 200)


@staff_required
@require_POST
def remove_mapping(request: SignedInRequest, mapping_id: int) -> HttpResponse:
    mapping = get_object_or_404(GroupMapping.objects.select_related("account", "tier"), pk=mapping_id)
    group_sync.remove_mapping(page_actor(request), mapping)
    messages.success(request, f"{mapping.group} no longer maps to {mapping.account}. Its members keep their "
                              "membership, now in staff's hands.")
    return redirect("staff-sign-in")
