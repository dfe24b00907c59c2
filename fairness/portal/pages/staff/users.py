"""Staff pages for users: the list (with their keys and usage), creating one, a first password,
moving their keys between tiers, deactivating and reactivating. Every change goes through
fairness.actions, which writes the audit log and holds the rules on who may."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST, require_safe

from fairness.actions import account_origin
from fairness.actions import users as user_actions
from fairness.actions.users import activation_refusal, password_refusal, refuse_password, set_password
from fairness.models import ApiKey, Tier
from fairness.portal.forms import CreateUserForm, SetPasswordForm, UserTierForm
from fairness.portal.pages.common import page_actor, staff_required
from fairness.portal.reports.queries import tokens_by_person
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _get_member_for_user(user: User, username: str) -> User:
    # Behind staff_required already; repeated so the helper is safe wherever it is called.
    if not (user.is_active and user.is_staff):
        raise Http404
    return get_object_or_404(get_user_model(), username=username)


@staff_required
@require_safe
def users(request: SignedInRequest) -> HttpResponse:
    people = get_user_model().objects.order_by("username").annotate(
        live_keys=Count("api_keys", filter=Q(api_keys__revoked_at=None))
    )
    tiers_of: dict[int, set[str]] = {}
    for owner_id, tier_name in ApiKey.objects.filter(revoked_at=None).values_list("owner_id", "tier__name"):
        tiers_of.setdefault(owner_id, set()).add(tier_name)
    tokens = tokens_by_person()
    rows = [(person, sorted(tiers_of.get(person.pk, ())), tokens.get(person.pk, 0)) for person in people]
    elsewhere = account_origin.elsewhere_for(person for person, _, _ in rows)
    return render(request, "staff/users.html", {
        "rows": rows, "tiers": Tier.objects.all(),
        "may_switch": {person.pk for person, _, _ in rows if not activation_refusal(request.user, person)},
        # Only the links this staff member may follow (the page itself refuses the rest).
        "may_set_password": {person.pk for person, _, _ in rows
                             if not password_refusal(request.user, person, elsewhere.get(person.pk, ""))},
    })


@staff_required
@require_POST
def set_user_active(request: SignedInRequest, username: str, active: bool) -> HttpResponse:
    """Deactivate or reactivate in one step: their keys stop (or work again) within a second."""
    person = _get_member_for_user(request.user, username)
    try:
        user_actions.set_user_active(page_actor(request), person, active)
    except PermissionDenied as refused:
        messages.error(request, str(refused))
        return redirect("staff-users")
    if active:
        messages.success(request, f"Reactivated {person}: they can sign in, and their live keys work again.")
    else:
        messages.success(request, f"Deactivated {person}: their keys stop on every gateway within a second, "
                                  "and they are signed out.")
    return redirect("staff-users")


@staff_required
@sensitive_post_parameters("password1", "password2")
def create_user(request: SignedInRequest) -> HttpResponse:
    form = CreateUserForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        person = user_actions.create_user(
            page_actor(request), data["username"], data["email"], data["is_staff"], form.password()
        )
        if person.has_usable_password():
            messages.success(request, f"Created {person}.")
            return redirect("staff-users")
        if password_refusal(request.user, person):  # staff: a superuser sets theirs
            messages.success(request, f"Created {person}. A superuser must set their password.")
            return redirect("staff-users")
        messages.success(request, f"Created {person}. Set a password so they can sign in.")
        return redirect("staff-user-password", username=person.get_username())
    return render(request, "staff/user_create.html", {"form": form})


@staff_required
@sensitive_post_parameters("new_password1", "new_password2")
def set_user_password(request: SignedInRequest, username: str) -> HttpResponse:
    """A first password for a researcher; anything more is a superuser's (password_refusal)."""
    person = _get_member_for_user(request.user, username)
    reason = password_refusal(request.user, person)
    try:
        if reason and request.method == "POST":
            refuse_password(page_actor(request), person, reason)  # a refused attempt is audited
        if reason:
            raise PermissionDenied(reason)
        form = SetPasswordForm(person, request.POST or None)
        if request.method == "POST" and form.is_valid():
            set_password(page_actor(request), person, form.cleaned_data["new_password1"])  # checks again
            messages.success(request, f"Set the password of {person}.")
            return redirect("staff-users")
    except PermissionDenied as refused:
        return render(request, "staff/user_password_refused.html", {"person": person, "reason": str(refused)},
                      status=403)
    return render(request, "staff/user_password.html", {"person": person, "form": form})


@staff_required
@require_POST
def set_user_tier(request: SignedInRequest, username: str) -> HttpResponse:
    person = _get_member_for_user(request.user, username)
    form = UserTierForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose one of the tiers.")
    else:
        moved = user_actions.set_user_tier(page_actor(request), person, form.cleaned_data["tier"])
        messages.success(request, f"Moved {moved} live key(s) of {person} to {form.cleaned_data['tier']}.")
    return redirect("staff-users")
